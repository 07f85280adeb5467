package gateway_test

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingUpstream answers 201 to every request and counts the POSTs (in any letter case).
func countingUpstream(t *testing.T) (*atomic.Int32, string) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.EqualFold(r.Method, http.MethodPost) {
			posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"p_1"}`)
	}))
	t.Cleanup(srv.Close)
	return &posts, srv.URL
}

// configFile writes a YAML config for the test and returns its path.
func configFile(t *testing.T, yaml string) string {
	p := filepath.Join(t.TempDir(), "idem.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// raw sends one request written by hand (so that no client cleans its path or method) and
// returns the response.
func raw(t *testing.T, url, request string) answer {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%q: %v", request, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// TestBinaryRouteVariants: a rule matches every spelling of its path that an upstream may
// route to the same handler (the canonical form: cleaned, decoded, without a trailing slash or
// ;parameters, any letter case), so a keyless POST to a variant of a required route is
// refused instead of reaching the upstream unprotected; a variant with a key gets the rule's
// TTL; an encoded slash is refused; a processed method in lower case is refused.
func TestBinaryRouteVariants(t *testing.T) {
	t.Parallel()
	posts, up := countingUpstream(t)
	cfg := configFile(t, "routes:\n  - {method: POST, path: /v1/payments, mode: required, ttl: 1h}\n")
	g := startGateway(t, "--upstream", up, "--store", "memory://", "--config", cfg)
	for _, path := range []string{"/v1/payments", "//v1/payments", "/v1/payments/", "/v1/./payments", "/v1/x/../payments",
		"/V1/payments", "/v1/PAYMENTS", "/v1/%70ayments", "/v1/payments;x", "/v1;v=2/payments"} {
		a := raw(t, g.url, "POST "+path+" HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
		if a.status != 400 || !strings.Contains(a.body, "missing-key") {
			t.Errorf("keyless POST %s: %d %s, want 400 missing-key (the rule is required)", path, a.status, a.body)
		}
	}
	for _, path := range []string{"/v1/payments%2F", "/v1%2Fpayments", "/v1/payments%5C", "/v1\\payments"} {
		a := raw(t, g.url, "POST "+path+" HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: k-amb\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
		if a.status != 400 || !strings.Contains(a.body, "ambiguous-path") || !strings.Contains(a.header.Get("Content-Type"), "problem+json") {
			t.Errorf("POST %s: %d %s, want 400 ambiguous-path", path, a.status, a.body)
		}
	}
	if n := posts.Load(); n != 0 {
		t.Fatalf("the upstream got %d POSTs that a required rule should have stopped", n)
	}
	// A variant with a key is processed by the rule: its TTL (1h, not the default 24h).
	a := raw(t, g.url, "POST /V1/payments/ HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: k-ttl\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	exp, err := http.ParseTime(a.header.Get("Idempotency-Expires"))
	if a.status != 201 || err != nil || time.Until(exp) > 2*time.Hour {
		t.Fatalf("POST /V1/payments/ with a key: %d, expires %q (%v), want 201 and the rule's 1h", a.status, a.header.Get("Idempotency-Expires"), err)
	}
	if r := raw(t, g.url, "POST /v1/payments HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: k-ttl\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"); r.status != 422 || posts.Load() != 1 {
		t.Fatalf("the same key on the canonical spelling: %d (posts %d), want 422: never a second execution", r.status, posts.Load())
	}
	// Methods are case-sensitive: "post" is not processed, so it is refused, not passed on.
	for _, m := range []string{"post", "Post", "pOST"} {
		a := raw(t, g.url, m+" /v1/other HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: k-m\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
		if a.status != 400 || !strings.Contains(a.body, "method-case") {
			t.Errorf("%s: %d %s, want 400 method-case", m, a.status, a.body)
		}
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("the upstream got %d POSTs, want 1", n)
	}
}

// TestBinaryIdentityHeaders: a scope header sent twice, or a key or scope header that the
// Connection header names (so the gateway would strip it before the upstream), is refused.
// The scope is an HMAC of the header under the secret, not a bare SHA-256 of it.
func TestBinaryIdentityHeaders(t *testing.T) {
	t.Parallel()
	posts, up := countingUpstream(t)
	store := sqliteStore(t)
	g := startGateway(t, "--upstream", up, "--store", store, "--scope-header", "X-API-Key")
	for name, req := range map[string]string{
		"two scope values":      "X-API-Key: tenant-a\r\nX-API-Key: tenant-b\r\n",
		"scope in Connection":   "X-API-Key: tenant-a\r\nConnection: keep-alive, x-api-key\r\n",
		"key in Connection":     "X-API-Key: tenant-a\r\nConnection: Idempotency-Key\r\n",
		"two Connection fields": "X-API-Key: tenant-a\r\nConnection: keep-alive\r\nConnection: X-Api-Key\r\n",
	} {
		a := raw(t, g.url, "POST /v1/charges HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: id-1\r\n"+req+"Content-Length: 2\r\n\r\n{}")
		if a.status != 400 || !strings.Contains(a.header.Get("Content-Type"), "problem+json") {
			t.Errorf("%s: %d %s, want 400", name, a.status, a.body)
		}
	}
	if n := posts.Load(); n != 0 {
		t.Fatalf("the upstream got %d refused requests", n)
	}
	a := raw(t, g.url, "POST /v1/charges HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: id-1\r\nX-API-Key: tenant-a\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	if a.status != 201 {
		t.Fatalf("a well-formed request: %d %s", a.status, a.body)
	}
	mac := hmac.New(sha256.New, []byte(testSecret))
	mac.Write([]byte("tenant-a"))
	keyed := hex.EncodeToString(mac.Sum(nil)) + "|id-1"
	bare := sha256.Sum256([]byte("tenant-a"))
	for key, want := range map[string]bool{keyed: true, hex.EncodeToString(bare[:]) + "|id-1": false} {
		out, err := exec.Command(idemBinary(t), "inspect", "--store", store, key).CombinedOutput()
		if (err == nil) != want {
			t.Errorf("idem inspect %s: %v %s (want found=%v)", key, err, out, want)
		}
	}
}

// TestBinaryScopeIsADecision: idem serve does not start without a scope decision, nor with a
// scope header and no secret, and says why.
func TestBinaryScopeIsADecision(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "memory://"}, "--scope none"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "memory://", "--scope-header", "X-API-Key"}, "scope_secret"},
		{[]string{"serve", "--upstream", "http://127.0.0.1:1", "--store", "memory://", "--scope-header", "X-API-Key", "--scope", "none"}, "exclude"},
	} {
		cmd := exec.Command(idemBinary(t), tc.args...)
		cmd.Env = append(os.Environ(), "IDEM_CONFIG=", "IDEM_SCOPE_SECRET=", "IDEM_SCOPE=", "IDEM_SCOPE_HEADER=")
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("idem %v: %v\n%s\nwant exit 2 and %q", tc.args, err, out, tc.want)
		}
	}
}

// TestBinaryHostsAreApart: the same key and body sent to two virtual hosts through one
// gateway never replays one host's response to the other: the host is in the fingerprint,
// so the second gets 422, and the upstream runs once.
func TestBinaryHostsAreApart(t *testing.T) {
	t.Parallel()
	posts, up := countingUpstream(t)
	g := startGateway(t, "--upstream", up, "--store", "memory://")
	send := func(host string) answer {
		return raw(t, g.url, "POST /v1/charges HTTP/1.1\r\nHost: "+host+"\r\nIdempotency-Key: vh-1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	}
	if a := send("a.example"); a.status != 201 {
		t.Fatalf("host a: %d %s", a.status, a.body)
	}
	if a := send("A.Example.:8080"); a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("host a, other spelling: %d %v, want the replay", a.status, a.header)
	}
	if b := send("b.example"); b.status != 422 {
		t.Fatalf("host b with host a's key: %d %s, want 422", b.status, b.body)
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("upstream POSTs = %d, want 1", n)
	}
}
