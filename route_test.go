package idem_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/storekit"
)

// routeSpy keeps the routes the engine asked the store to claim with.
type routeSpy struct {
	*memstore.Store
	routes []string
}

func (s *routeSpy) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	s.routes = append(s.routes, req.Route)
	return s.Store.Reserve(ctx, req)
}

func created(context.Context) (idem.Response, error) { return idem.Response{Status: 201}, nil }

// The engine claims with the route the context names (ReserveRequest.Route), or none, and the
// route reaches the record.
func TestEngineRoute(t *testing.T) {
	ctx := context.Background()
	spy := &routeSpy{Store: memstore.New()}
	eng, err := idem.New(spy, idem.Options{Heartbeat: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Do(idem.WithRoute(ctx, "POST /v1/orders/{id}/pay"), "routed", fp1, created); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Do(ctx, "plain", fp1, created); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Do(idem.WithRoute(ctx, ""), "empty", fp1, created); err != nil {
		t.Fatal(err)
	}
	if want := []string{"POST /v1/orders/{id}/pay", "", ""}; !slices.Equal(spy.routes, want) {
		t.Fatalf("claimed with routes %q, want %q", spy.routes, want)
	}
	for key, want := range map[string]string{"routed": "POST /v1/orders/{id}/pay", "plain": "", "empty": ""} {
		if rec, err := spy.Get(ctx, key); err != nil || rec.Route != want {
			t.Errorf("%s: record %+v, %v; want route %q", key, rec, err, want)
		}
	}
	// The typed helpers pass the context on.
	if _, _, err := idem.DoJSON(idem.WithRoute(ctx, "POST /typed"), eng, "typed", 1, func(context.Context) (int, error) { return 2, nil }); err != nil {
		t.Fatal(err)
	}
	if rec, err := spy.Get(ctx, "typed"); err != nil || rec.Route != "POST /typed" {
		t.Errorf("typed: record %+v, %v; want route POST /typed", rec, err)
	}
}

// WithRoute cuts a long route at a rune boundary and makes it valid UTF-8 without NUL, by the
// same rule as storekit.CleanRoute, which stores apply to a route given to them directly.
func TestWithRouteCleans(t *testing.T) {
	long := strings.Repeat("a", idem.MaxRouteLen-1) + "\u00e9tage"
	for _, tc := range []struct{ in, want string }{
		{"POST /v1/orders", "POST /v1/orders"},
		{"", ""},
		{strings.Repeat("x", 300), strings.Repeat("x", idem.MaxRouteLen)},
		{long, strings.Repeat("a", idem.MaxRouteLen-1)}, // é would end past the limit
		{"GET /caf\xff", "GET /caf\uFFFD"},
		{"GET /a\x00b", "GET /a\uFFFDb"},
		{"\x00GET /", "\uFFFDGET /"},                                                   // a NUL first is replaced too
		{strings.Repeat("y", idem.MaxRouteLen), strings.Repeat("y", idem.MaxRouteLen)}, // exactly the limit: kept whole
	} {
		got := idem.RouteFromContext(idem.WithRoute(context.Background(), tc.in))
		if got != tc.want || len(got) > idem.MaxRouteLen || !utf8.ValidString(got) {
			t.Errorf("WithRoute(%.40q) = %.40q (%d bytes), want %.40q", tc.in, got, len(got), tc.want)
		}
		if kit := storekit.CleanRoute(tc.in); kit != got {
			t.Errorf("storekit.CleanRoute(%.40q) = %.40q, but WithRoute keeps %.40q", tc.in, kit, got)
		}
	}
	if got := idem.RouteFromContext(context.Background()); got != "" {
		t.Errorf("RouteFromContext without a route = %q", got)
	}
}
