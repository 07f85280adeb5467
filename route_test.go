package idem_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/storekit"
)

// routeSpy keeps the routes and requests the engine asked the store to claim with.
type routeSpy struct {
	*memstore.Store
	routes   []string
	requests []*idem.Request
}

func (s *routeSpy) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	s.routes = append(s.routes, req.Route)
	s.requests = append(s.requests, req.Request)
	return s.Store.Reserve(ctx, req)
}

func created(context.Context) (idem.Response, error) { return idem.Response{Status: 201}, nil }

func newSpied(t *testing.T) (*routeSpy, *idem.Engine) {
	t.Helper()
	spy := &routeSpy{Store: memstore.New()}
	eng, err := idem.New(spy, idem.Options{Heartbeat: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return spy, eng
}

// The engine claims with the route the Call names (ReserveRequest.Route), or none, and the
// route reaches the record. Do, the short form, claims with none.
func TestEngineRoute(t *testing.T) {
	ctx := context.Background()
	spy, eng := newSpied(t)
	if _, err := eng.Run(ctx, idem.Call{Key: "routed", Fingerprint: fp1, Route: "POST /v1/orders/{id}/pay"}, created); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Do(ctx, "plain", fp1, created); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Run(ctx, idem.Call{Key: "empty", Fingerprint: fp1}, created); err != nil {
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
	// The typed helpers: RunJSON keeps the Call's route, DoJSON none, Wrap the function's name.
	if _, _, err := idem.RunJSON(ctx, eng, idem.Call{Key: "typed", Route: "POST /typed"}, 1, func(context.Context) (int, error) { return 2, nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := idem.DoJSON(ctx, eng, "typed-short", 1, func(context.Context) (int, error) { return 2, nil }); err != nil {
		t.Fatal(err)
	}
	double := idem.Wrap(eng, "double", func(n int) string { return "n" }, func(_ context.Context, n int) (int, error) { return 2 * n, nil })
	if _, err := double(ctx, 4); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"typed": "POST /typed", "typed-short": "", idem.ScopedKey("double", "n"): "double"} {
		if rec, err := spy.Get(ctx, key); err != nil || rec.Route != want {
			t.Errorf("%s: record %+v, %v; want route %q", key, rec, err, want)
		}
	}
}

// RunJSON derives the fingerprint from the input: a Call that names one is refused, and the
// function does not run.
func TestRunJSONRefusesAFingerprint(t *testing.T) {
	_, eng := newSpied(t)
	ran := false
	_, _, err := idem.RunJSON(context.Background(), eng, idem.Call{Key: "k", Fingerprint: fp1}, 1, func(context.Context) (int, error) {
		ran = true
		return 2, nil
	})
	if !errors.Is(err, idem.ErrInvalidInput) || ran {
		t.Fatalf("RunJSON with a Fingerprint: ran %v, err %v; want ErrInvalidInput and no run", ran, err)
	}
}

// The request the Call carries reaches the store and the record; a nil one keeps none.
func TestEngineRequest(t *testing.T) {
	ctx := context.Background()
	spy, eng := newSpied(t)
	sent := &idem.Request{Method: "POST", Target: "/v1/orders?x=1", Header: map[string][]string{"Content-Type": {"application/json"}},
		Body: []byte(`{"n":1}`), BodySize: 7}
	if _, err := eng.Run(ctx, idem.Call{Key: "kept", Fingerprint: fp1, Request: sent}, created); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Run(ctx, idem.Call{Key: "none", Fingerprint: fp1, Route: "POST /none"}, created); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Do(ctx, "short", fp1, created); err != nil {
		t.Fatal(err)
	}
	if len(spy.requests) != 3 || spy.requests[0] != sent || spy.requests[1] != nil || spy.requests[2] != nil {
		t.Fatalf("claimed with requests %v, want the one sent, then none twice", spy.requests)
	}
	if rec, err := spy.Get(ctx, "kept"); err != nil || !rec.Request.Equal(sent) {
		t.Errorf("kept: record %+v, %v; want the request %+v", rec, err, sent)
	}
	for _, key := range []string{"none", "short"} {
		if rec, err := spy.Get(ctx, key); err != nil || rec.Request != nil {
			t.Errorf("%s: record %+v, %v; want no request", key, rec, err)
		}
	}
}

// Run cuts a long route at a rune boundary and makes it valid UTF-8 without NUL before the
// store sees it, by the same rule as storekit.CleanRoute, which stores apply to a route given
// to them directly.
func TestRunCleansRoute(t *testing.T) {
	long := strings.Repeat("a", idem.MaxRouteLen-1) + "\u00e9tage"
	ctx := context.Background()
	spy, eng := newSpied(t)
	for i, tc := range []struct{ in, want string }{
		{"POST /v1/orders", "POST /v1/orders"},
		{"", ""},
		{strings.Repeat("x", 300), strings.Repeat("x", idem.MaxRouteLen)},
		{long, strings.Repeat("a", idem.MaxRouteLen-1)}, // é would end past the limit
		{"GET /caf\xff", "GET /caf\uFFFD"},
		{"GET /a\x00b", "GET /a\uFFFDb"},
		{"\x00GET /", "\uFFFDGET /"},                                                   // a NUL first is replaced too
		{strings.Repeat("y", idem.MaxRouteLen), strings.Repeat("y", idem.MaxRouteLen)}, // exactly the limit: kept whole
	} {
		key := "k" + string(rune('a'+i))
		if _, err := eng.Run(ctx, idem.Call{Key: key, Fingerprint: fp1, Route: tc.in}, created); err != nil {
			t.Fatal(err)
		}
		got := spy.routes[len(spy.routes)-1]
		if got != tc.want || len(got) > idem.MaxRouteLen || !utf8.ValidString(got) {
			t.Errorf("Run with route %.40q claimed with %.40q (%d bytes), want %.40q", tc.in, got, len(got), tc.want)
		}
		if kit := storekit.CleanRoute(tc.in); kit != got {
			t.Errorf("storekit.CleanRoute(%.40q) = %.40q, but Run keeps %.40q", tc.in, kit, got)
		}
		if rec, err := spy.Get(ctx, key); err != nil || rec.Route != tc.want {
			t.Errorf("record %s: %+v, %v; want route %.40q", key, rec, err, tc.want)
		}
	}
}
