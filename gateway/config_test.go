package gateway

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func TestParseConfig(t *testing.T) {
	t.Setenv("IDEM_TEST_UPSTREAM", "http://127.0.0.1:9000")
	c, err := Parse([]byte(`
listen: 127.0.0.1:8081
upstream: ${IDEM_TEST_UPSTREAM}
store: memory://
scope: none
ttl: 1h
max_body: 2MiB
methods: [post, put]
routes:
  - method: POST
    path: /webhooks/github
    key_header: X-GitHub-Delivery
    mode: required
  - path: /v1/charges/{id}/capture
    fingerprint: json
    ignore_fields: [sent_at]
`))
	if err != nil {
		t.Fatal(err)
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Upstream != "http://127.0.0.1:9000" || time.Duration(c.TTL) != time.Hour || c.MaxBody != 2<<20 ||
		c.Methods[1] != "PUT" || c.Routes[0].KeyHeader != "X-GitHub-Delivery" || time.Duration(c.Lease) != 30*time.Second {
		t.Fatalf("config %+v", c)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	cases := map[string]string{
		"upstream: http://x\nttl: 5\n":                                   "duration",
		"upstream: http://x\nmax_body: lots\n":                           "size",
		"upstream: http://x\nlisten_typo: 1\n":                           "listen_typo",
		"upstream: ftp://x\n":                                            "upstream",
		"store: memory://\n":                                             "upstream is required",
		"upstream: http://x\nlog_format: xml\n":                          "log_format",
		"upstream: http://x\nuncertain: maybe\n":                         "uncertain",
		"upstream: http://x\nlease: 1h\nttl: 1m\n":                       "ttl",
		"upstream: http://x\nroutes: [{path: v1}]\n":                     "routes[0]",
		"upstream: http://x\nroutes: [{path: /a, mode: on}]\n":           "mode",
		"upstream: http://x\nroutes: [{path: /a, ignore_fields: [t]}]\n": "fingerprint: json",
	}
	for in, want := range cases {
		c, err := Parse([]byte("scope: none\n" + in))
		if err == nil {
			err = c.WithDefaults().Validate()
		}
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.HasPrefix(err.Error(), "gateway: invalid options: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want a gateway invalid-options error mentioning %q", in, err, want)
		}
	}
}

// TestScopeIsADecision: without a scope header nor scope none the gateway does not start, and
// a scope header needs a secret.
func TestScopeIsADecision(t *testing.T) {
	cases := map[string]string{
		"upstream: http://x\n":                                                     "scope is not set",
		"upstream: http://x\nscope: tenant\n":                                      "only value is none",
		"upstream: http://x\nscope: none\nscope_header: X-API-Key\n":               "exclude",
		"upstream: http://x\nscope_header: X-API-Key\n":                            "scope_secret",
		"upstream: http://x\nscope_header: X-API-Key\nscope_secret: short\n":       "fewer than 16",
		"upstream: http://x\nscope: none\nroutes: [{path: /a, scope_header: X}]\n": "scope_secret",
	}
	for in, want := range cases {
		c, err := Parse([]byte(in))
		if err == nil {
			err = c.WithDefaults().Validate()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want it to mention %q", in, err, want)
		}
	}
	for _, in := range []string{"upstream: http://x\nscope: none\n", "upstream: http://x\nscope_header: X-API-Key\nscope_secret: 0123456789abcdef\n"} {
		c, err := Parse([]byte(in))
		if err == nil {
			err = c.WithDefaults().Validate()
		}
		if err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]int64{"1048576": 1 << 20, "1MiB": 1 << 20, "512KiB": 512 << 10, "1MB": 1e6, "10kB": 1e4, "7B": 7} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1XB", "MiB", "99999999999GiB"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestMatchPath(t *testing.T) {
	cases := []struct {
		pattern, path string
		want          bool
	}{
		{"/v1/charges", "/v1/charges", true},
		{"/v1/charges", "/v1/charges/", true},
		{"/v1/charges", "//v1/charges", true},
		{"/v1/charges", "/V1/Charges", true},
		{"/v1/charges", "/v1/./charges", true},
		{"/v1/charges", "/v1/x/../charges", true},
		{"/v1/charges", "/v1/charges;x", true},
		{"/v1/charges", "/v1;a/charges", true},
		{"/V1/Charges/", "/v1/charges", true},
		{"/v1/charges", "/v1/charges/x", false},
		{"/v1/charges", "/v1/chargesx", false},
		{"/v1/*", "/v1/charges/ch_1", true},
		{"/v1/*", "/v1", true},
		{"/v1/*", "/v10/x", false},
		{"/v1/orders/{id}/pay", "/v1/orders/42/pay", true},
		{"/v1/orders/{id}/pay", "/v1/orders//pay", false},
		{"/v1/orders/{id}/pay", "/v1/orders/42/refund", false},
		{"/v1/orders/{id}", "/v1/orders/42/pay", false},
		{"/v1/orders/{id}/*", "/v1/orders/42/pay/now", true},
		{"/v1/orders/{Id}/pay", "/V1/ORDERS/42/PAY/", true},
		{"/*", "/anything/at/all", true},
	}
	for _, tc := range cases {
		if got := matchPath(canonicalPattern(tc.pattern), canonicalPath(tc.path)); got != tc.want {
			t.Errorf("matchPath(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}

// TestAmbiguousPath: escaped paths that an upstream may split otherwise than the gateway.
func TestAmbiguousPath(t *testing.T) {
	for _, p := range []string{"/v1/payments%2F", "/v1%2fpayments", "/v1%5Cpayments", "/v1\\payments", "/v1/pay%00ments", "/v1/pay%1fments", "/v1/%7F"} {
		if !ambiguousPath(p) {
			t.Errorf("%q is not ambiguous", p)
		}
	}
	for _, p := range []string{"/v1/payments", "/v1/pay%20ments", "/v1/%70ayments", "/v1/payments;x", "/%E2%82%AC", "/v1/100%25"} {
		if ambiguousPath(p) {
			t.Errorf("%q is ambiguous", p)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("upstream: http://127.0.0.1:9000\nroutes: [{path: /a/{b}/*, mode: off}]\n"))
	f.Add([]byte("ttl: 1h\nmax_body: 1MiB\n"))
	f.Add([]byte("routes:\n  - {path: /x, fingerprint: json, ignore_fields: [a.b]}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err != nil {
			return
		}
		c = c.WithDefaults()
		if c.Validate() != nil {
			return
		}
		for _, r := range c.Routes {
			rt := route{rule: r, pattern: canonicalPattern(r.Path)}
			_ = rt.match("POST", "/a/b/c")
		}
	})
}
