package cli

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/internal/syncbuf"
)

// TestConditions: the condition inspect, list, release and the console show for each kind of
// record, and what it says of the next request.
func TestConditions(t *testing.T) {
	t.Parallel()
	now := time.Now()
	h := time.Hour
	for _, tc := range []struct {
		rec     idem.Record
		want    console.Condition
		explain string
	}{
		{idem.Record{State: idem.StateCompleted, CreatedAt: now.Add(-h), ExpiresAt: now.Add(h)}, console.Completed, "completed: retries get the stored response"},
		{idem.Record{State: idem.StateCompleted, CreatedAt: now.Add(-2 * h), ExpiresAt: now.Add(-h)}, console.Expired, "expired: counts as absent"},
		{idem.Record{State: idem.StateInProgress, CreatedAt: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(h)}, console.Running, "running: its holder renews its lease (1m0s left)"},
		{idem.Record{State: idem.StateInProgress, CreatedAt: now, LeaseUntil: now.Add(h), ExpiresAt: now.Add(h)}, console.Held, "held: the outcome was uncertain"},
		{idem.Record{State: idem.StateInProgress, CreatedAt: now.Add(-h), LeaseUntil: now.Add(-time.Minute), ExpiresAt: now.Add(h)}, console.Stale, "stale: its lease ran out 1m0s ago"},
		{idem.Record{State: idem.StateInProgress, CreatedAt: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now}, console.Released, "released: the next request with this key executes"},
		{idem.Record{State: idem.StateInProgress, CreatedAt: now.Add(-2 * h), LeaseUntil: now.Add(-h), ExpiresAt: now.Add(-h)}, console.Expired, "expired: counts as absent"},
		{idem.Record{State: idem.StateInProgress, CreatedAt: now, LeaseUntil: now, ExpiresAt: now.Add(h)}, console.Stale, "stale:"},
	} {
		got := console.ConditionOf(tc.rec, now)
		if got != tc.want {
			t.Errorf("%+v: condition %s, want %s", tc.rec, got, tc.want)
		}
		if e := console.Explain(got, tc.rec, now); !strings.HasPrefix(e, tc.explain) {
			t.Errorf("%+v: explained %q, want it to begin %q", tc.rec, e, tc.explain)
		}
		if live := got == console.Running || got == console.Held; got.Live() != live {
			t.Errorf("%s: Live() = %t", got, got.Live())
		}
	}
}

// TestConsoleNeedsACredential: serve --console-listen and admin refuse to start without a
// credential, or with a short one; the console is off without --console-listen.
func TestConsoleNeedsACredential(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		vars map[string]string
		args []string
	}{
		{nil, []string{"serve", "--upstream", "http://127.0.0.1:1", "--scope", "none", "--store", "memory://", "--console-listen", "127.0.0.1:0"}},
		{map[string]string{"IDEM_CONSOLE_TOKEN": "short"}, []string{"serve", "--upstream", "http://127.0.0.1:1", "--scope", "none", "--store", "memory://", "--console-listen", "127.0.0.1:0"}},
		{map[string]string{"IDEM_CONSOLE_USER": "ops"}, []string{"console", "--store", "memory://", "--listen", "127.0.0.1:0"}},
		{nil, []string{"console", "--store", "memory://", "--listen", "127.0.0.1:0"}},
	} {
		e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return tc.vars[k] }}
		err := commands[tc.args[0]].run(context.Background(), e, tc.args[1:])
		if err == nil || !strings.Contains(err.Error(), "credential") && !strings.Contains(err.Error(), "fewer than") && !strings.Contains(err.Error(), "IDEM_CONSOLE_PASSWORD is empty") {
			t.Errorf("%v with %v: %v, want a refusal", tc.args, tc.vars, err)
		}
	}
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	fs := newFlags(e, "serve", "")
	f := bindServe(e, fs)
	if err := parse(fs, nil); err != nil {
		t.Fatal(err)
	}
	if s, err := f.console.sidecar(e); s != nil || err != nil {
		t.Fatalf("without --console-listen: a console (%v)", err)
	}
}

// TestConsoleCommand: `idem console` serves a store's records to a holder of the token only, and
// says rates need a gateway.
func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	store := seed(t)
	logs := &syncbuf.Buffer{}
	vars := map[string]string{"IDEM_CONSOLE_TOKEN": "admin-command-token-0123"}
	e := &env{stdout: io.Discard, stderr: logs, getenv: func(k string) string { return vars[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runConsole(ctx, e, []string{"--store", store, "--listen", "127.0.0.1:0"}) }()
	addr := regexp.MustCompile(`console listening" addr=(http://[0-9.:]+)`)
	var base string
	for deadline := time.Now().Add(60 * time.Second); base == ""; {
		select {
		case err := <-done:
			t.Fatalf("admin: %v", err)
		default:
		}
		if m := addr.FindStringSubmatch(logs.String()); m != nil {
			base = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no console address in:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	get := func(auth string) (int, string) {
		req, _ := http.NewRequest("GET", base+"/?state=stuck", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d", code)
	}
	code, page := get("Bearer admin-command-token-0123")
	if code != 200 || !strings.Contains(page, ">stale<") || !strings.Contains(page, ">held<") || strings.Contains(page, ">done<") || !strings.Contains(page, "--console-listen") {
		t.Errorf("stuck records: %d\n%s", code, page)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestConsoleRefusesWeakCredentials: serve --console-listen and admin refuse to start with a user
// and no password, or a password of one byte (basic `admin:` would otherwise get in beside a
// token), with a password but no user, and with a short or repetitive token or password; each
// error names the variable to fix.
func TestConsoleRefusesWeakCredentials(t *testing.T) {
	t.Parallel()
	const strong = "console-token-0123456789"
	serve := []string{"serve", "--upstream", "http://127.0.0.1:1", "--scope", "none", "--store", "memory://", "--console-listen", "127.0.0.1:0"}
	admin := []string{"console", "--store", "memory://", "--listen", "127.0.0.1:0"}
	for _, tc := range []struct {
		vars map[string]string
		want string
	}{
		{map[string]string{"IDEM_CONSOLE_TOKEN": strong, "IDEM_CONSOLE_USER": "admin"}, "IDEM_CONSOLE_PASSWORD is empty"},
		{map[string]string{"IDEM_CONSOLE_TOKEN": strong, "IDEM_CONSOLE_USER": "admin", "IDEM_CONSOLE_PASSWORD": "x"}, "IDEM_CONSOLE_PASSWORD has 1 bytes"},
		{map[string]string{"IDEM_CONSOLE_USER": "admin", "IDEM_CONSOLE_PASSWORD": "password"}, "IDEM_CONSOLE_PASSWORD has 8 bytes"},
		{map[string]string{"IDEM_CONSOLE_USER": "admin", "IDEM_CONSOLE_PASSWORD": "passwordpassword"}, "IDEM_CONSOLE_PASSWORD has 7 distinct"},
		{map[string]string{"IDEM_CONSOLE_PASSWORD": strong}, "IDEM_CONSOLE_USER is empty"},
		{map[string]string{"IDEM_CONSOLE_TOKEN": strings.Repeat("0", 32)}, "IDEM_CONSOLE_TOKEN) has 1 distinct"},
		{map[string]string{"IDEM_CONSOLE_TOKEN": "0123456789"}, "IDEM_CONSOLE_TOKEN) has 10 bytes"},
	} {
		for _, args := range [][]string{serve, admin} {
			e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return tc.vars[k] }}
			err := commands[args[0]].run(context.Background(), e, args[1:])
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s with %v: %v, want a refusal saying %q", args[0], tc.vars, err, tc.want)
			}
		}
	}
}

// startConsoleCommand runs `idem console` on store with vars as its environment, and returns the
// console's base URL; the console stops when the test ends.
func startConsoleCommand(t *testing.T, store string, vars map[string]string) string {
	t.Helper()
	logs := &syncbuf.Buffer{}
	e := &env{stdout: io.Discard, stderr: logs, getenv: func(k string) string { return vars[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runConsole(ctx, e, []string{"--store", store, "--listen", "127.0.0.1:0"}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	addr := regexp.MustCompile(`console listening" addr=(http://[0-9.:]+)`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("admin: %v", err)
		default:
		}
		if m := addr.FindStringSubmatch(logs.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no console address in:\n%s", logs.String())
		}
	}
}

// TestConsoleUserPasswordOnly: `idem console` with a user and password and no token lets that user
// in, and nobody with an empty secret: an empty bearer token, or basic credentials with an
// empty password and any user name, get 401.
func TestConsoleUserPasswordOnly(t *testing.T) {
	t.Parallel()
	const pass = "ops-console-password-42"
	base := startConsoleCommand(t, seed(t), map[string]string{"IDEM_CONSOLE_USER": "ops", "IDEM_CONSOLE_PASSWORD": pass})
	get := func(set func(*http.Request)) int {
		req, _ := http.NewRequest("GET", base+"/", nil)
		set(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, auth := range []string{"Bearer ", "Bearer", "Basic " + basicAuth("ops", ""), "Basic " + basicAuth("admin", ""), "Basic " + basicAuth("", ""), "Basic " + basicAuth("admin", pass), "Bearer " + pass} {
		if code := get(func(r *http.Request) { r.Header.Set("Authorization", auth) }); code != http.StatusUnauthorized {
			t.Errorf("with %q: %d, want 401", auth, code)
		}
	}
	if code := get(func(r *http.Request) { r.SetBasicAuth("ops", pass) }); code != 200 {
		t.Errorf("with the user and password: %d, want 200", code)
	}
}

func basicAuth(user, pass string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}
