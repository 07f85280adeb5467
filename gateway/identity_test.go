package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/store/memstore"
)

// TestIdentityHeadersPerRule: the headers that identify a request are the ones its own rule
// names, a route's key header or scope header as well as the gateway's: a Connection header
// naming one of them (the gateway would strip it before the upstream) is refused on that
// route, and tenants keyed by a route's or the gateway's scope header never share a stored
// answer.
func TestIdentityHeadersPerRule(t *testing.T) {
	t.Parallel()
	var effects atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"effect":%d}`, effects.Add(1))
	}))
	t.Cleanup(up.Close)
	newGateway := func(cfg Config) *Gateway {
		cfg.Upstream = up.URL
		g, err := New(context.Background(), cfg, Options{Store: memstore.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	post := func(g *Gateway, path string, header map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{}`))
		for k, v := range header {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w
	}

	// One trusted caller, with a route keyed by its own header and a route scoped per tenant.
	single := newGateway(Config{Scope: ScopeNone, ScopeSecret: strings.Repeat("s3cret-", 4), Routes: []Route{
		{Path: "/v1/orders", KeyHeader: "X-Request-Id"},
		{Path: "/v1/tenants", ScopeHeader: "X-Tenant"},
	}})
	for _, tc := range []struct {
		name, path string
		header     map[string]string
		want       int
	}{
		{"route key header in Connection", "/v1/orders", map[string]string{"X-Request-Id": "r-1", "Connection": "X-Request-Id"}, 400},
		{"route key header elsewhere", "/v1/payments", map[string]string{"Idempotency-Key": "p-1", "X-Request-Id": "r-1", "Connection": "X-Request-Id"}, 201},
		{"route scope header in Connection", "/v1/tenants", map[string]string{"Idempotency-Key": "t-1", "X-Tenant": "a", "Connection": "x-tenant"}, 400},
		{"route scope header elsewhere", "/v1/payments", map[string]string{"Idempotency-Key": "p-2", "X-Tenant": "a", "Connection": "X-Tenant"}, 201},
	} {
		if w := post(single, tc.path, tc.header); w.Code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, w.Body, tc.want)
		}
	}
	// The route's tenants: one key, two tenants, two effects; each tenant's retry replays its own.
	a := post(single, "/v1/tenants", map[string]string{"Idempotency-Key": "same", "X-Tenant": "a"})
	b := post(single, "/v1/tenants", map[string]string{"Idempotency-Key": "same", "X-Tenant": "b"})
	if a.Body.String() == b.Body.String() {
		t.Fatalf("two tenants of a route's scope header with one key got one answer: %s", a.Body)
	}
	if again := post(single, "/v1/tenants", map[string]string{"Idempotency-Key": "same", "X-Tenant": "b"}); again.Body.String() != b.Body.String() {
		t.Fatalf("tenant b's retry: %s, want its own answer %s", again.Body, b.Body)
	}

	// Tenants by the gateway's scope header, on a route without one of its own.
	tenants := newGateway(Config{ScopeHeader: "X-API-Key", ScopeSecret: strings.Repeat("s3cret-", 4), Routes: []Route{
		{Path: "/v1/orders", KeyHeader: "X-Request-Id"},
	}})
	if w := post(tenants, "/v1/orders", map[string]string{"X-Request-Id": "r-2", "X-API-Key": "a", "Connection": "X-API-Key"}); w.Code != 400 {
		t.Errorf("gateway scope header in Connection: %d %s, want 400", w.Code, w.Body)
	}
	a = post(tenants, "/v1/orders", map[string]string{"X-Request-Id": "same", "X-API-Key": "a"})
	b = post(tenants, "/v1/orders", map[string]string{"X-Request-Id": "same", "X-API-Key": "b"})
	if a.Code != 201 || b.Code != 201 || a.Body.String() == b.Body.String() {
		t.Fatalf("two tenants of the gateway's scope header with one key: %d %s and %d %s, want two effects", a.Code, a.Body, b.Code, b.Body)
	}
}
