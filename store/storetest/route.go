package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// route checks idem.ReserveRequest.Route: a claim stores its route and Get, a duplicate's
// Reserve and List return it; a takeover keeps it (and sets one on a record that had none); a
// key claimed again after it expired or was released carries the new claim's route; a claim
// without a route stores none; a route of idem.MaxRouteLen bytes of unicode round-trips.
func (s suite) route(t *testing.T, b *bundle) {
	const routeA, routeB = "POST /v1/orders/{id}/pay", "PATCH /v1/caf\u00e9/{id}"
	c := ctx(t)
	reserve := func(key, route string, now time.Time) idem.Reservation {
		t.Helper()
		res, err := b.store.Reserve(c, idem.ReserveRequest{Key: key, Fingerprint: fpA, Route: route, Now: now, Lease: lease, TTL: ttl})
		if err != nil {
			t.Fatalf("Reserve(%q, route %q): %v", key, route, err)
		}
		return res
	}
	check := func(what, got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: Route = %q, want %q", what, got, want)
		}
	}

	k := b.key("route")
	res := reserve(k, routeA, b.base)
	if !res.Claimed || res.Takeover || res.Record.Attempts != 1 {
		t.Fatalf("first Reserve with a route: %+v, want a new claim", res)
	}
	check("new claim", res.Record.Route, routeA)
	check("Get after the claim", mustGet(t, b.store, k).Route, routeA)
	// A duplicate while the lease holds: the stored record, with the first route.
	if res := reserve(k, routeB, b.base.Add(time.Second)); res.Claimed {
		t.Fatal("a duplicate claimed a held key")
	} else {
		check("duplicate's record", res.Record.Route, routeA)
	}
	if res := mustReserve(t, b.store, k, fpA, b.base.Add(time.Second)); res.Claimed {
		t.Fatal("a duplicate claimed a held key")
	} else {
		check("Reserve's record", res.Record.Route, routeA)
	}
	// A takeover continues the claim: it keeps its route, whatever it is given.
	later := b.base.Add(lease + time.Second)
	res = reserve(k, routeB, later)
	if !res.Claimed || !res.Takeover {
		t.Fatalf("Reserve with a route after the lease: %+v, want a takeover", res)
	}
	check("takeover", res.Record.Route, routeA)
	check("Get after the takeover", mustGet(t, b.store, k).Route, routeA)
	later = later.Add(lease + time.Second)
	res = mustReserve(t, b.store, k, fpA, later)
	if !res.Claimed || !res.Takeover {
		t.Fatalf("Reserve without a route after the lease: %+v, want a takeover", res)
	}
	check("takeover by Reserve", res.Record.Route, routeA)
	// Completed: Get, a replay and List carry it.
	if err := b.store.Complete(c, k, res.Record.Token, idem.Response{Status: 201, Body: []byte("ok")}, later, later.Add(ttl)); err != nil {
		t.Fatal(err)
	}
	check("Get after Complete", mustGet(t, b.store, k).Route, routeA)
	if res := reserve(k, routeB, later.Add(time.Second)); res.Claimed {
		t.Fatal("a replay claimed a completed key")
	} else {
		check("replay's record", res.Record.Route, routeA)
	}

	// A record claimed without a route has none; a takeover with a route gives it one.
	none := b.key("route-none")
	check("Reserve's claim", mustClaim(t, b.store, none, fpA, b.base).Route, "")
	check("Get after Reserve", mustGet(t, b.store, none).Route, "")
	res = reserve(none, routeB, b.base.Add(lease+time.Second))
	if !res.Claimed || !res.Takeover {
		t.Fatalf("Reserve with a route after the lease: %+v, want a takeover", res)
	}
	check("takeover of a record without a route", res.Record.Route, routeB)
	check("Get after that takeover", mustGet(t, b.store, none).Route, routeB)

	// Expired, then claimed again: the new claim's route, or none.
	exp := b.key("route-expired")
	reserve(exp, routeA, b.base)
	res = reserve(exp, routeB, b.base.Add(ttl+time.Second))
	if !res.Claimed || res.Takeover || res.Record.Attempts != 1 {
		t.Fatalf("Reserve with a route after expiry: %+v, want a new claim", res)
	}
	check("claim of an expired key", res.Record.Route, routeB)
	check("Get after that claim", mustGet(t, b.store, exp).Route, routeB)
	res = mustReserve(t, b.store, exp, fpA, b.base.Add(2*ttl+2*time.Second))
	if !res.Claimed || res.Takeover {
		t.Fatalf("Reserve without a route after expiry: %+v, want a new claim", res)
	}
	check("Reserve's claim of an expired key", res.Record.Route, "")
	check("Get after Reserve's claim of an expired key", mustGet(t, b.store, exp).Route, "")

	// Released, then claimed again: the new claim's route.
	rel := b.key("route-released")
	res = reserve(rel, routeA, b.base)
	if err := b.store.Release(c, rel, res.Record.Token); err != nil {
		t.Fatal(err)
	}
	res = reserve(rel, routeB, b.base.Add(time.Second))
	if !res.Claimed || res.Takeover {
		t.Fatalf("Reserve with a route after Release: %+v, want a new claim", res)
	}
	check("claim of a released key", res.Record.Route, routeB)

	// The longest route, in unicode, round-trips.
	long := strings.Repeat("\u00e9", idem.MaxRouteLen/2)
	lk := b.key("route-long")
	check("long route's claim", reserve(lk, long, b.base).Record.Route, long)
	check("Get of the long route", mustGet(t, b.store, lk).Route, long)

	if l, ok := b.store.(idem.Lister); ok {
		page, err := l.List(c, idem.ListQuery{Prefix: b.key("route")})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{k: routeA, none: routeB, exp: "", rel: routeB, lk: long}
		for _, r := range page.Records {
			w, ok := want[r.Key]
			if !ok {
				t.Errorf("List: unexpected record %q", r.Key)
				continue
			}
			check("List "+r.Key, r.Route, w)
			delete(want, r.Key)
		}
		for key := range want {
			t.Errorf("List: record %q missing", key)
		}
	}
}
