package idemlambda_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/store/memstore"
)

// newStoreEngine is newEngine with its store, to read the records back.
func newStoreEngine(t *testing.T) (*memstore.Store, *idem.Engine) {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	eng, err := idem.New(st, idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return st, eng
}

// recordRoute returns the route of the record under key.
func recordRoute(t *testing.T, st *memstore.Store, key string) string {
	t.Helper()
	rec, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("record %q: %v", key, err)
	}
	return rec.Route
}

// Wrap's records carry the function's name as their route.
func TestWrapRecordRoute(t *testing.T) {
	t.Parallel()
	st, eng := newStoreEngine(t)
	var key string
	h, err := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "order_id", Name: "charge-orders",
		OnEvent: func(ev idemlambda.Event) { key = ev.Key }},
		func(context.Context, map[string]any) (string, error) { return "charged", nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h(context.Background(), map[string]any{"order_id": "o-1"}); err != nil {
		t.Fatal(err)
	}
	if got := recordRoute(t, st, key); got != "charge-orders" {
		t.Fatalf("record's route %q, want the function's name charge-orders", got)
	}
}

// The proxies' records carry the route API Gateway matched, with the method, as idemhttp's
// DefaultRoute names it: a REST API's resource, an HTTP API's route key, or the method and the
// path when there is no template (a $default route, a function URL).
func TestProxyRecordRoute(t *testing.T) {
	t.Parallel()
	st, eng := newStoreEngine(t)
	var key string
	o := &orders{}
	opt := idemlambda.ProxyOptions{Runner: eng, Logger: quiet, OnEvent: func(ev idemlambda.Event) { key = ev.Key }}
	v1, err := idemlambda.WrapAPIGateway(opt, o.v1)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := idemlambda.WrapHTTPAPI(opt, o.v2)
	if err != nil {
		t.Fatal(err)
	}
	rest := v1Request("tenant-a", "k-rest", `{"n":1}`)
	rest.Resource, rest.Path = "/orders/{id}", "/orders/7"
	restNoTemplate := v1Request("tenant-a", "k-rest-plain", `{"n":1}`)
	restNoTemplate.Resource = ""
	httpAPI := v2Request("tenant-a", "k-http", `{"n":1}`)
	httpAPI.RouteKey, httpAPI.RawPath = "POST /orders/{id}", "/orders/7"
	fnURL := v2Request("tenant-a", "k-url", `{"n":1}`)
	fnURL.RouteKey, fnURL.RawPath = "$default", "/orders/8"
	for _, tc := range []struct {
		name string
		send func() error
		want string
	}{
		{"REST API", func() error { _, err := v1(context.Background(), rest); return err }, "POST /orders/{id}"},
		{"REST API without a resource", func() error { _, err := v1(context.Background(), restNoTemplate); return err }, "POST /orders"},
		{"HTTP API", func() error { _, err := v2(context.Background(), httpAPI); return err }, "POST /orders/{id}"},
		{"function URL", func() error { _, err := v2(context.Background(), fnURL); return err }, "POST /orders/8"},
	} {
		key = ""
		if err := tc.send(); err != nil || key == "" {
			t.Fatalf("%s: %v (key %q)", tc.name, err, key)
		}
		if got := recordRoute(t, st, key); got != tc.want {
			t.Errorf("%s: record's route %q, want %q", tc.name, got, tc.want)
		}
	}
}
