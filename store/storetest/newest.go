package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// newest checks idem.ListNewestFirst: the newest record of the whole store comes first,
// whatever its key sorts as, ahead of more than one page of older keys; pages follow the
// order (CreatedAt descending, then key descending) without a gap or a repeat, also while
// newer records are written between pages; and each filter (time range, route, status,
// state, prefix), alone and with the others, returns exactly the matching records, in both
// orders.
func (s suite) newest(t *testing.T, b *bundle) {
	l, ok := b.store.(idem.Lister)
	if !ok {
		t.Skip("storetest: store does not implement idem.Lister; newest-first tests skipped")
	}
	c := longCtx(t)
	f := &listFixture{b: b, l: l} // its own records, below, and the listing tests' pager
	// A record as the listing tests write it, with a route and a response status.
	type rec struct {
		listed
		route  string
		status int // 0: in progress
	}
	var all []rec
	routes := []string{"POST /a", "POST /b", ""}
	add := func(key string, created time.Time, i int) {
		t.Helper()
		r := rec{listed: listed{key: key, created: created}}
		r.route = routes[i%len(routes)]
		res, err := b.store.Reserve(c, idem.ReserveRequest{Key: key, Fingerprint: fpA, Route: r.route, Now: created, Lease: lease, TTL: ttl})
		if err != nil || !res.Claimed {
			t.Fatalf("Reserve(%q, route %q): %+v, %v", key, r.route, res, err)
		}
		claim := res.Record
		if i%2 == 0 {
			r.status, r.done = 200+i%3, true
			resp := idem.Response{Status: r.status, Body: []byte("body"), BodyOmitted: i%4 == 0}
			if err := b.store.Complete(c, key, claim.Token, resp, created, created.Add(ttl)); err != nil {
				t.Fatal(err)
			}
		}
		all = append(all, r)
	}
	// 25 older keys, each created a millisecond after the previous one, their keys in the
	// opposite order; two created in the same microsecond; then the newest, whose key sorts
	// after every other.
	for i := range 25 {
		add(b.key(fmt.Sprintf("n/%02d", 24-i)), b.base.Add(time.Duration(i)*time.Millisecond), i)
	}
	tie := b.base.Add(30 * time.Millisecond)
	add(b.key("n/tie-a"), tie, 25)
	add(b.key("n/tie-b"), tie, 26)
	add(b.key("n/\uffff-newest"), b.base.Add(time.Minute), 27)

	listAll := func(t *testing.T, q idem.ListQuery) []idem.Record {
		t.Helper()
		return f.listAll(t, c, q)
	}
	keys := func(recs []idem.Record) []string {
		var ks []string
		for _, r := range recs {
			ks = append(ks, r.Key)
		}
		return ks
	}
	want := func(newest bool, keep func(rec) bool) []string {
		var ws []rec
		for _, r := range all {
			if keep(r) {
				ws = append(ws, r)
			}
		}
		slices.SortFunc(ws, func(a, b rec) int {
			if !newest {
				return strings.Compare(a.key, b.key)
			}
			if c := b.created.Compare(a.created); c != 0 {
				return c
			}
			return strings.Compare(b.key, a.key)
		})
		var ks []string
		for _, w := range ws {
			ks = append(ks, w.key)
		}
		return ks
	}

	// The whole store (this store holds no other records), newest first, ten a page.
	// Every store that lists lists newest first: an operator's console opens on it.
	orders := []idem.ListOrder{idem.ListByKey, idem.ListNewestFirst}
	first, err := l.List(c, idem.ListQuery{Order: idem.ListNewestFirst, Limit: 10})
	if err != nil {
		t.Fatalf("List newest first: %v", err)
	}
	if len(first.Records) == 0 || first.Records[0].Key != b.key("n/\uffff-newest") || first.Next == "" {
		t.Fatalf("newest first, page 1 = %q (next %q), want %q first among more than one page", keys(first.Records), first.Next, b.key("n/\uffff-newest"))
	}
	everything := func(rec) bool { return true }
	if got, w := keys(listAll(t, idem.ListQuery{Order: idem.ListNewestFirst, Limit: 10})), want(true, everything); !slices.Equal(got, w) {
		t.Errorf("newest first, every page:\n got %q\nwant %q", got, w)
	}
	created := map[string]time.Time{}
	for _, r := range all {
		created[r.key] = r.created
	}
	for _, r := range listAll(t, idem.ListQuery{Order: idem.ListNewestFirst, Limit: 7}) {
		if !r.CreatedAt.Equal(created[r.Key]) {
			t.Errorf("listed %q created at %v, want %v", r.Key, r.CreatedAt, created[r.Key])
		}
	}

	// Filters, alone and together, in both orders and with small pages.
	since, until := b.base.Add(5*time.Millisecond), b.base.Add(30*time.Millisecond)
	cases := []struct {
		name string
		q    idem.ListQuery
		keep func(rec) bool
	}{
		{"since", idem.ListQuery{CreatedSince: since}, func(r rec) bool { return !r.created.Before(since) }},
		{"before", idem.ListQuery{CreatedBefore: until}, func(r rec) bool { return r.created.Before(until) }},
		{"range", idem.ListQuery{CreatedSince: since, CreatedBefore: until}, func(r rec) bool { return !r.created.Before(since) && r.created.Before(until) }},
		{"status 201", idem.ListQuery{Status: 201}, func(r rec) bool { return r.status == 201 }},
		{"completed", idem.ListQuery{State: idem.StateCompleted}, func(r rec) bool { return r.status != 0 }},
		{"in progress", idem.ListQuery{State: idem.StateInProgress}, func(r rec) bool { return r.status == 0 }},
		{"prefix", idem.ListQuery{Prefix: b.key("n/1")}, func(r rec) bool { return strings.HasPrefix(r.key, b.key("n/1")) }},
		{"status and range", idem.ListQuery{Status: 200, CreatedSince: since, CreatedBefore: until}, func(r rec) bool {
			return r.status == 200 && !r.created.Before(since) && r.created.Before(until)
		}},
		{"status absent", idem.ListQuery{Status: 404}, func(rec) bool { return false }},
	}
	cases = append(cases,
		struct {
			name string
			q    idem.ListQuery
			keep func(rec) bool
		}{"route", idem.ListQuery{Route: "POST /a"}, func(r rec) bool { return r.route == "POST /a" }},
		struct {
			name string
			q    idem.ListQuery
			keep func(rec) bool
		}{"route, state and since", idem.ListQuery{Route: "POST /b", State: idem.StateCompleted, CreatedSince: since}, func(r rec) bool {
			return r.route == "POST /b" && r.status != 0 && !r.created.Before(since)
		}},
	)
	for _, tc := range cases {
		for _, order := range orders {
			q := tc.q
			q.Order, q.Limit = order, 4
			got, w := keys(listAll(t, q)), want(order == idem.ListNewestFirst, tc.keep)
			if !slices.Equal(got, w) {
				t.Errorf("%s (order %d):\n got %q\nwant %q", tc.name, order, got, w)
			}
		}
	}

	// Newer records written between pages: the pages already begun go on where they were,
	// each older record once.
	q := idem.ListQuery{Order: idem.ListNewestFirst, Limit: 6}
	later := 0 // records claimed between pages, n/later-0 …
	var got []idem.Record
	for i := 0; ; i++ {
		page, err := l.List(c, q)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page.Records...)
		if page.Next == "" {
			break
		}
		mustClaim(t, b.store, b.key(fmt.Sprintf("n/later-%d", i)), fpA, b.base.Add(2*time.Minute+time.Duration(i)*time.Millisecond))
		later++
		q.Cursor = page.Next
	}
	if w := want(true, everything); !slices.Equal(keys(got), w) {
		t.Errorf("newest first with writes between pages:\n got %q\nwant %q", keys(got), w)
	}
	// A listing begun afterwards starts with them, the newest first: records claimed after a
	// store has listed are indexed as they are claimed.
	if top, err := l.List(c, idem.ListQuery{Order: idem.ListNewestFirst, Limit: 2}); err != nil || len(top.Records) != 2 ||
		top.Records[0].Key != b.key(fmt.Sprintf("n/later-%d", later-1)) || later > 1 && top.Records[1].Key != b.key(fmt.Sprintf("n/later-%d", later-2)) {
		t.Errorf("newest first after %d later claims: %+v, %v", later, top, err)
	}

	// A cursor of one order is refused by the other.
	byKey, err := l.List(c, idem.ListQuery{Limit: 2})
	if err != nil || byKey.Next == "" {
		t.Fatalf("List by key: %+v, %v", byKey, err)
	}
	if _, err := l.List(c, idem.ListQuery{Order: idem.ListNewestFirst, Cursor: byKey.Next}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("a key-order cursor newest first: %v, want ErrInvalidInput", err)
	}
	if _, err := l.List(c, idem.ListQuery{Cursor: first.Next}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("a newest-first cursor in key order: %v, want ErrInvalidInput", err)
	}
}
