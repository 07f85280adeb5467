package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
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

	// A retry keyed by the route's key header replays, for its own tenant.
	if again := post(single, "/v1/orders", map[string]string{"X-Request-Id": "r-3"}); again.Code != 201 {
		t.Fatalf("keyed by the route's header: %d %s", again.Code, again.Body)
	} else if retry := post(single, "/v1/orders", map[string]string{"X-Request-Id": "r-3"}); retry.Body.String() != again.Body.String() {
		t.Fatalf("retry keyed by the route's key header: %s, want the stored %s", retry.Body, again.Body)
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

// TestRuleKeyAndFingerprint: a rule's key taken from a JSON field, and its JSON fingerprint
// with ignored fields, as the rule says: a retry whose body differs only in the ignored field
// or in spacing replays the stored answer; one that differs elsewhere is a mismatch (422).
func TestRuleKeyAndFingerprint(t *testing.T) {
	t.Parallel()
	var effects atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"effect":%d}`, effects.Add(1))
	}))
	t.Cleanup(up.Close)
	g, err := New(context.Background(), Config{Upstream: up.URL, Scope: ScopeNone, Routes: []Route{
		{Path: "/v1/orders", KeyJSONField: "order_id", Fingerprint: "json", IgnoreFields: []string{"sent_at"}},
	}}, Options{Store: memstore.New(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	post := func(body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w
	}
	first := post(`{"order_id":"o-1","amount":5,"sent_at":"10:00"}`)
	if first.Code != 201 {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	for _, body := range []string{
		`{"order_id":"o-1","amount":5,"sent_at":"10:01"}`,
		`{ "sent_at": "10:02", "amount": 5, "order_id": "o-1" }`,
	} {
		if w := post(body); w.Code != 201 || w.Body.String() != first.Body.String() {
			t.Errorf("retry %s: %d %s, want the stored %s", body, w.Code, w.Body, first.Body)
		}
	}
	if w := post(`{"order_id":"o-1","amount":6,"sent_at":"10:00"}`); w.Code != http.StatusUnprocessableEntity {
		t.Errorf("same order id, another amount: %d %s, want 422", w.Code, w.Body)
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// TestLoadScopeSecret: the secret comes from the file without its trailing newline; a file
// that cannot be read or holds too short a secret is an error naming the setting.
func TestLoadScopeSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, short := dir+"/good", dir+"/short"
	if err := os.WriteFile(good, []byte(strings.Repeat("k", MinScopeSecret)+"\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("k\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := (Config{ScopeSecretFile: good, ScopeSecret: "ignored"}).LoadScopeSecret(); err != nil || string(b) != strings.Repeat("k", MinScopeSecret) {
		t.Errorf("from a file: %q %v", b, err)
	}
	for _, c := range []Config{{ScopeSecretFile: dir + "/missing"}, {ScopeSecretFile: short}, {ScopeSecret: "short"}} {
		if b, err := c.LoadScopeSecret(); err == nil || !strings.Contains(err.Error(), "scope_secret") {
			t.Errorf("secret %q, file %q: %q %v, want an error naming the setting", c.ScopeSecret, c.ScopeSecretFile, b, err)
		}
	}
	if b, err := (Config{}).LoadScopeSecret(); b != nil || err != nil {
		t.Errorf("no secret: %q %v", b, err)
	}
}

// TestRetainedRequestRedactsScope: a retained request never keeps the value of the header
// that scopes it, the gateway's or its route's, even when its name does not say it is a
// credential: it identifies a tenant, as an API key does.
func TestRetainedRequestRedactsScope(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	st := memstore.New()
	g, err := New(context.Background(), Config{Upstream: up.URL, ScopeHeader: "X-Tenant", ScopeSecret: strings.Repeat("s3cret-", 4),
		RetainRequest: true, Routes: []Route{{Path: "/v1/orgs", ScopeHeader: "X-Org"}}},
		Options{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	for path, h := range map[string]string{"/v1/charges": "X-Tenant", "/v1/orgs": "X-Org"} {
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "k"+path)
		r.Header.Set(h, "tenant-identity-"+h)
		r.Header.Set("X-Trace", "kept")
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != 201 {
			t.Fatalf("%s: %d %s", path, w.Code, w.Body)
		}
	}
	ctx := context.Background()
	page, err := st.List(ctx, idem.ListQuery{})
	if err != nil || len(page.Records) != 2 {
		t.Fatalf("records: %v %d", err, len(page.Records))
	}
	for _, light := range page.Records {
		rec, err := st.Get(ctx, light.Key)
		if err != nil || rec.Request == nil {
			t.Fatalf("%s: %v, request %v", light.Key, err, rec.Request)
		}
		for name, vs := range rec.Request.Header {
			if strings.HasPrefix(strings.Join(vs, ""), "tenant-identity-") {
				t.Errorf("%s: the retained request keeps the scope header %s: %q", rec.Route, name, vs)
			}
		}
		if fmt.Sprint(rec.Request.Header["X-Trace"]) != "[kept]" {
			t.Errorf("%s: retained headers %v, want X-Trace kept", rec.Route, rec.Request.Header)
		}
	}
}
