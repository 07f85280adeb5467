package idem_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// routeSpy counts the claims that went through Reserve and through ReserveRoute.
type routeSpy struct {
	*memstore.Store
	plain, routed int
}

func (s *routeSpy) Reserve(ctx context.Context, key, fp string, now time.Time, lease, window time.Duration) (idem.Reservation, error) {
	s.plain++
	return s.Store.Reserve(ctx, key, fp, now, lease, window)
}

func (s *routeSpy) ReserveRoute(ctx context.Context, key, fp, route string, now time.Time, lease, window time.Duration) (idem.Reservation, error) {
	s.routed++
	return s.Store.ReserveRoute(ctx, key, fp, route, now, lease, window)
}

// plainStore hides memstore's ReserveRoute: a store written before routes existed.
type plainStore struct{ idem.Store }

func created(context.Context) (idem.Response, error) { return idem.Response{Status: 201}, nil }

// The engine claims through ReserveRoute when the context names a route, and through Reserve
// otherwise; the route reaches the record, and a store without routes works as before.
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
	if spy.routed != 1 || spy.plain != 2 {
		t.Fatalf("claims through ReserveRoute %d, Reserve %d; want 1 and 2", spy.routed, spy.plain)
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

	old, err := idem.New(plainStore{memstore.New()}, idem.Options{Heartbeat: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := old.Do(idem.WithRoute(ctx, "POST /x"), "k", fp1, created); err != nil || res.Response.Status != 201 {
		t.Fatalf("store without routes: %+v, %v", res, err)
	}
	if rec, err := old.Store().Get(ctx, "k"); err != nil || rec.Route != "" {
		t.Fatalf("store without routes: record %+v, %v", rec, err)
	}
}

// WithRoute cuts a long route at a rune boundary and makes it valid UTF-8 without NUL.
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
	}
	if got := idem.RouteFromContext(context.Background()); got != "" {
		t.Errorf("RouteFromContext without a route = %q", got)
	}
}
