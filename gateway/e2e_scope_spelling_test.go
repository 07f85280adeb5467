package gateway_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBinaryScopeHeaderSpelling: a request that carries the scope header spelled with
// underscores (X_API_KEY, which servers that follow CGI's naming read as X-API-Key) is refused
// with 400 and the problem type scope-header-spelling, whatever the letter case and whether or
// not X-API-Key comes too, and never reaches the upstream: otherwise the caller would be in the
// anonymous scope (or another caller's) while the upstream sees its identity.
func TestBinaryScopeHeaderSpelling(t *testing.T) {
	t.Parallel()
	posts, up := countingUpstream(t)
	g := startGateway(t, "--upstream", up, "--store", "memory://", "--scope-header", "X-API-Key")
	for i, hdr := range []string{
		"X_API_KEY: tenant-a\r\n",
		"x_api_key: tenant-a\r\n",
		"X_Api-Key: tenant-a\r\n",
		"X-API-Key: tenant-a\r\nX_API_KEY: tenant-b\r\n",
	} {
		a := raw(t, g.url, "POST /v1/charges HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: spelling-"+string(rune('a'+i))+"\r\n"+hdr+
			"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
		var p struct{ Type string }
		_ = json.Unmarshal([]byte(a.body), &p)
		if a.status != 400 || p.Type != "https://idemkit.dev/problems/scope-header-spelling" {
			t.Errorf("%q: %d %s, want 400 scope-header-spelling", hdr, a.status, a.body)
		}
	}
	if n := posts.Load(); n != 0 {
		t.Fatalf("%d refused requests reached the upstream", n)
	}
	a := raw(t, g.url, "POST /v1/charges HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: spelling-ok\r\nX-API-Key: tenant-a\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	if a.status != 201 || posts.Load() != 1 {
		t.Fatalf("the header under its own name: %d %s (posts %d)", a.status, a.body, posts.Load())
	}
}

// TestBinaryScopeHeaderWithUnderscoreRefused: serve refuses to start with a scope header name
// that contains an underscore, given as a flag or as a route's scope_header, and says which.
func TestBinaryScopeHeaderWithUnderscoreRefused(t *testing.T) {
	t.Parallel()
	cfg := configFile(t, "routes:\n  - {method: POST, path: /v1/orders, scope_header: X_Tenant}\n")
	for _, args := range [][]string{
		{"--scope-header", "X_API_KEY", "--scope-secret", testSecret},
		{"--scope-header", "X-API-Key", "--scope-secret", testSecret, "--config", cfg},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, idemBinary(t), append([]string{"serve", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--store", "memory://"}, args...)...).CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "scope_header") || !strings.Contains(string(out), "underscore") {
			t.Errorf("serve %v: %v\n%s\nwant a refusal naming scope_header and the underscore", args, err, out)
		}
	}
}
