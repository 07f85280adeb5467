package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// TestRouteRecorded: the record of a request carries the route of the rule it matched (its
// method and path as configured; the request's method for a rule of any method), and the
// request's method and path when it matched none.
func TestRouteRecorded(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	defer up.Close()
	st := memstore.New()
	g, err := New(context.Background(), Config{
		Upstream: up.URL, Scope: ScopeNone,
		Routes: []Route{{Method: "POST", Path: "/v1/orders/{id}/pay"}, {Method: "*", Path: "/v1/any/*"}},
	}, Options{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g)
	defer srv.Close()
	want := map[string]string{}
	for i, tc := range []struct{ method, path, route string }{
		{"POST", "/v1/Orders/42/pay", "POST /v1/orders/{id}/pay"},
		{"PATCH", "/v1/any/thing", "PATCH /v1/any/*"},
		{"POST", "/v2/other", "POST /v2/other"},
	} {
		key := "k" + string(rune('a'+i))
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader("{}"))
		req.Header.Set(idem.KeyHeader, key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("%s %s: status %d", tc.method, tc.path, resp.StatusCode)
		}
		want[key] = tc.route
	}
	page, err := st.List(context.Background(), idem.ListQuery{})
	if err != nil || len(page.Records) != len(want) {
		t.Fatalf("List = %+v, %v", page, err)
	}
	for _, r := range page.Records {
		k := r.Key[len(r.Key)-2:] // the client's key, after the (empty) scope
		if r.Route != want[k] {
			t.Errorf("%s: route %q, want %q", r.Key, r.Route, want[k])
		}
	}
}
