package cli

import (
	"errors"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"postgres://app:hunter22@db:5432/idem?sslmode=require":               "postgres://app:xxxxx@db:5432/idem?sslmode=require",
		"postgres://db/idem?user=app&password=hunter22&sslpassword=k3y":      "postgres://db/idem?password=xxxxx&sslpassword=xxxxx&user=app",
		"dynamodb://idem?region=eu-west-1&aws_secret_access_key=AbC%2Fd&x=1": "dynamodb://idem?aws_secret_access_key=xxxxx&region=eu-west-1&x=1",
		"redis://:p4ss@127.0.0.1:6379/0?prefix=a":                            "redis://:xxxxx@127.0.0.1:6379/0?prefix=a",
		"dynamodb://t?secret=s3&session_token=tok&AWS_SESSION_TOKEN=T2":      "dynamodb://t?AWS_SESSION_TOKEN=xxxxx&secret=xxxxx&session_token=xxxxx",
		"sqlite://./idem.db": "sqlite://./idem.db",
		"memory://":          "memory://",
		"mysql://root:pw%40x@tcp(127.0.0.1:3306)/test": "mysql://root:xxxxx@tcp(127.0.0.1:3306)/test",
	}
	for in, want := range cases {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
	if got := redact("postgres://u:pw@[bad/x?password=zz"); strings.Contains(got, "pw") || strings.Contains(got, "zz") {
		t.Errorf("an unparsable URL: %q", got)
	}
}

// TestRedactedStoreErrors: a store that fails to open never puts the URL's secrets in the
// error the command prints, and errors.Is still sees the cause.
func TestRedactedStoreErrors(t *testing.T) {
	t.Parallel()
	for _, store := range []string{
		"postgres://app:hunter22@127.0.0.1:1/idem?sslpassword=k3y-s3cret&password=pw-s3cret&connect_timeout=1",
		"postgres://app:hunter22@127.0.0.1:notaport/idem?password=pw-s3cret",
		"redis://:hunter22@127.0.0.1:1/0?password=pw-s3cret",
		"dynamodb://t?endpoint=http://127.0.0.1:1&aws_secret_access_key=pw-s3cret&region=x",
		"nosuchscheme://app:hunter22@h/?secret=pw-s3cret",
	} {
		code, out, errs := run(t, "inspect", "--store", store, "some-key")
		if code == 0 {
			t.Errorf("%s: opened", store)
		}
		for _, secret := range []string{"hunter22", "pw-s3cret", "k3y-s3cret"} {
			if strings.Contains(out+errs, secret) {
				t.Errorf("%s: the output shows %q:\n%s%s", store, secret, out, errs)
			}
		}
	}
	cause := errors.New(`open "postgres://u:hunter22@h/?password=pw-s3cret": refused`)
	err := redactError(cause, "postgres://u:hunter22@h/?password=pw-s3cret")
	if !errors.Is(err, cause) || strings.Contains(err.Error(), "hunter22") || strings.Contains(err.Error(), "pw-s3cret") {
		t.Fatalf("redactError: %v (is cause: %v)", err, errors.Is(err, cause))
	}
}
