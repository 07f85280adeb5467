package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// TestRouteRuleMethodMatters: a rule's method is part of its match. `PATCH /v1/orders
// mode: off` turns PATCH off on that path and leaves POST processed: two POSTs with one key
// are one effect, while two PATCHes with one key pass through, two effects.
func TestRouteRuleMethodMatters(t *testing.T) {
	t.Parallel()
	var effects = map[string]*atomic.Int32{"POST": {}, "PATCH": {}}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		effects[r.Method].Add(1)
		w.WriteHeader(201)
	}))
	defer up.Close()
	g, err := New(context.Background(), Config{
		Upstream: up.URL, Scope: ScopeNone,
		Routes: []Route{{Method: "PATCH", Path: "/v1/orders", Mode: "off"}},
	}, Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g)
	defer srv.Close()
	for _, method := range []string{"POST", "PATCH"} {
		for range 2 {
			req, _ := http.NewRequest(method, srv.URL+"/v1/orders", strings.NewReader(`{"n":1}`))
			req.Header.Set(idem.KeyHeader, "order-"+method)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 201 {
				t.Fatalf("%s: status %d", method, resp.StatusCode)
			}
		}
	}
	if n := effects["POST"].Load(); n != 1 {
		t.Errorf("two POSTs with one key: %d effects, want 1 (a PATCH rule turned POST off)", n)
	}
	if n := effects["PATCH"].Load(); n != 2 {
		t.Errorf("two PATCHes with one key on a mode: off rule: %d effects, want 2 (passed through)", n)
	}
}
