package storetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// list checks idem.Lister, one property per subtest; each is a function below, named for
// what it checks. They share one set of records (listFixture) and run in order.
func (s suite) list(t *testing.T, b *bundle) {
	l, ok := b.store.(idem.Lister)
	if !ok {
		t.Skip("storetest: store does not implement idem.Lister; List tests skipped")
	}
	f := newListFixture(t, b, l)
	for _, p := range []struct {
		name string
		fn   func(*testing.T, *listFixture)
	}{
		{"PagesInKeyOrderOnce", listPagesInKeyOrderOnce},
		{"State", listFiltersByState},
		{"CreatedBefore", listFiltersByAge},
		{"Prefix", listFiltersByPrefix},
		{"Empty", listNothingIsEmpty},
		{"CursorOfAnotherQuery", listCursorOfAnotherQuery},
		{"ManyRecords", listManyRecordsWrittenConcurrently},
		{"ExpiredReleasedDeleted", listAsGetReads},
		{"PagingWhileWriting", listPagingWhileWriting},
		{"InvalidQueries", listRefusesInvalidQueries},
	} {
		t.Run(p.name, func(t *testing.T) { p.fn(t, f) })
	}
}

// listed is a record the listing tests wrote, as they expect it listed.
type listed struct {
	key     string
	created time.Time
	done    bool
}

// listFixture is the store under test and the records every listing property reads: 24
// records under the prefix "p/", one per millisecond, every third completed (with a body the
// listing must not carry), plus keys just outside the prefix on both sides and a unicode key
// at its end.
type listFixture struct {
	b   *bundle
	l   idem.Lister
	all []listed
}

func newListFixture(t *testing.T, b *bundle, l idem.Lister) *listFixture {
	c := longCtx(t)
	f := &listFixture{b: b, l: l}
	add := func(key string, i int, done bool) {
		now := b.base.Add(time.Duration(i) * time.Millisecond)
		claim := mustClaim(t, b.store, key, fpA, now)
		if done {
			resp := idem.Response{Status: 201 + i, Header: map[string][]string{"X": {"y"}}, Body: []byte("body"), BodyOmitted: i%2 == 0}
			if err := b.store.Complete(c, key, claim.Token, resp, now, now.Add(ttl)); err != nil {
				t.Fatal(err)
			}
		}
		f.all = append(f.all, listed{key, now, done})
	}
	for i := range 24 {
		add(b.key(fmt.Sprintf("p/%02d", 23-i)), i, i%3 == 0) // key order is not creation order
	}
	add(b.key("p/\u00e9t\u00e9"), 24, true)
	add(b.key("p."), 25, false) // '.' sorts just before '/', '0' just after
	add(b.key("p0"), 26, true)
	return f
}

// inPrefix reports whether w is under the prefix "p/".
func (f *listFixture) inPrefix(w listed) bool { return strings.HasPrefix(w.key, f.b.key("p/")) }

// listAll pages through q, checks each page's size and cursor, and returns every record.
func (f *listFixture) listAll(t *testing.T, c context.Context, q idem.ListQuery) []idem.Record {
	t.Helper()
	var got []idem.Record
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("List: more than 100 pages; the cursor does not advance")
		}
		page, err := f.l.List(c, q)
		if err != nil {
			t.Fatalf("List(%+v): %v", q, err)
		}
		limit := cmp.Or(q.Limit, idem.DefaultListLimit)
		if len(page.Records) > limit {
			t.Fatalf("List: page of %d records, limit %d", len(page.Records), limit)
		}
		if page.Next != "" && len(page.Records) != limit {
			t.Fatalf("List: page of %d records (limit %d) with a next cursor", len(page.Records), limit)
		}
		got = append(got, page.Records...)
		if page.Next == "" {
			return got
		}
		q.Cursor = page.Next
	}
}

// check lists q in full and compares it with the records of written that keep says belong to
// it: the same keys, once each, in key order, each record as Get reads it without its headers
// and body.
func (f *listFixture) check(t *testing.T, c context.Context, q idem.ListQuery, written []listed, keep func(listed) bool) {
	t.Helper()
	var keys []string
	for _, w := range written {
		if keep(w) {
			keys = append(keys, w.key)
		}
	}
	slices.Sort(keys)
	got := f.listAll(t, c, q)
	var gotKeys []string
	for i, r := range got {
		gotKeys = append(gotKeys, r.Key)
		if len(got) > 100 && i%10 != 0 {
			continue // long listings: every tenth record is compared with Get
		}
		full := mustGet(t, f.b.store, r.Key)
		light := full
		if full.Response != nil {
			light.Response = &idem.Response{Status: full.Response.Status, BodyOmitted: full.Response.BodyOmitted}
		}
		checkSame(t, "listed record "+r.Key, r, light)
		if r.Response != nil && (r.Response.Header != nil || r.Response.Body != nil) {
			t.Errorf("listed record %q carries headers or a body: %+v", r.Key, r.Response)
		}
	}
	if !slices.Equal(gotKeys, keys) {
		t.Errorf("List(%+v) keys:\n got %q\nwant %q", q, gotKeys, keys)
	}
}

// listPagesInKeyOrderOnce: at every page size, a listing returns each record once, in key
// order, whether it names a prefix or not.
func listPagesInKeyOrderOnce(t *testing.T, f *listFixture) {
	c := longCtx(t)
	for _, limit := range []int{1, 5, 12, 25, 0} {
		f.check(t, c, idem.ListQuery{Prefix: f.b.key("p/"), Limit: limit}, f.all, f.inPrefix)
	}
	// No prefix: the store's every record (each subtest has a store of its own).
	f.check(t, c, idem.ListQuery{Limit: 10}, f.all, func(listed) bool { return true })
}

// listFiltersByState: a State lists the records in that state only.
func listFiltersByState(t *testing.T, f *listFixture) {
	c := longCtx(t)
	f.check(t, c, idem.ListQuery{Prefix: f.b.key("p/"), State: idem.StateInProgress, Limit: 4}, f.all,
		func(w listed) bool { return f.inPrefix(w) && !w.done })
	f.check(t, c, idem.ListQuery{Prefix: f.b.key("p/"), State: idem.StateCompleted, Limit: 3}, f.all,
		func(w listed) bool { return f.inPrefix(w) && w.done })
}

// listFiltersByAge: CreatedBefore lists the records created strictly before it, alone or with
// a State.
func listFiltersByAge(t *testing.T, f *listFixture) {
	c := longCtx(t)
	cut := f.b.base.Add(10 * time.Millisecond) // strictly before: record 10 is out
	f.check(t, c, idem.ListQuery{Prefix: f.b.key("p/"), CreatedBefore: cut, Limit: 4}, f.all,
		func(w listed) bool { return f.inPrefix(w) && w.created.Before(cut) })
	f.check(t, c, idem.ListQuery{Prefix: f.b.key("p/"), CreatedBefore: cut, State: idem.StateCompleted}, f.all,
		func(w listed) bool { return f.inPrefix(w) && w.created.Before(cut) && w.done })
}

// listFiltersByPrefix: a prefix lists the keys that begin with it, and only those: keys that
// sort just before and after it are out, a unicode prefix finds its key.
func listFiltersByPrefix(t *testing.T, f *listFixture) {
	c := longCtx(t)
	f.check(t, c, idem.ListQuery{Prefix: f.b.key("p/1")}, f.all, func(w listed) bool {
		return strings.HasPrefix(w.key, f.b.key("p/1"))
	})
	f.check(t, c, idem.ListQuery{Prefix: f.b.key("p/\u00e9")}, f.all, func(w listed) bool { return w.key == f.b.key("p/\u00e9t\u00e9") })
	f.check(t, c, idem.ListQuery{Prefix: f.b.key("p"), Limit: 7}, f.all, func(listed) bool { return true })
}

// listNothingIsEmpty: a query that matches nothing lists no records and no cursor.
func listNothingIsEmpty(t *testing.T, f *listFixture) {
	c := longCtx(t)
	page, err := f.l.List(c, idem.ListQuery{Prefix: f.b.key("none/")})
	if err != nil || len(page.Records) != 0 || page.Next != "" {
		t.Fatalf("List of an empty prefix = %+v, %v; want no records, no cursor", page, err)
	}
	page, err = f.l.List(c, idem.ListQuery{Prefix: f.b.key("p/"), CreatedBefore: f.b.base})
	if err != nil || len(page.Records) != 0 || page.Next != "" {
		t.Fatalf("List of nothing old enough = %+v, %v; want no records, no cursor", page, err)
	}
}

// listCursorOfAnotherQuery: a cursor is a position in key order, so another query given it
// resumes after the same key; a cursor past the query's prefix lists nothing, harmlessly.
func listCursorOfAnotherQuery(t *testing.T, f *listFixture) {
	c := longCtx(t)
	first, err := f.l.List(c, idem.ListQuery{Prefix: f.b.key("p/"), Limit: 6})
	if err != nil || first.Next == "" {
		t.Fatalf("List: %+v, %v", first, err)
	}
	after := first.Records[5].Key
	f.check(t, c, idem.ListQuery{Prefix: f.b.key("p/"), State: idem.StateCompleted, Cursor: first.Next}, f.all,
		func(w listed) bool { return f.inPrefix(w) && w.done && w.key > after })
	page, err := f.l.List(c, idem.ListQuery{Prefix: f.b.key("p/0"), Cursor: first.Next, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range page.Records {
		if r.Key <= after || !strings.HasPrefix(r.Key, f.b.key("p/0")) {
			t.Errorf("List with a foreign cursor returned %q", r.Key)
		}
	}
}

// listManyRecordsWrittenConcurrently: 600 records written by 8 goroutines, out of key order,
// so that a store that merges several partitions of its keys meets partitions of many
// records, are listed once each and in order, at every page size up to idem.MaxListLimit and
// with every filter.
func listManyRecordsWrittenConcurrently(t *testing.T, f *listFixture) {
	c := longCtx(t)
	b := f.b
	const n, writers = 600, 8
	made := make([]listed, n)
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			errs <- func() error {
				for i := w; i < n; i += writers {
					key := b.key(fmt.Sprintf("m/%04d", (i*7919)%n)) // written out of key order
					now := b.base.Add(time.Duration(i%50) * time.Millisecond)
					res, err := b.store.Reserve(c, idem.ReserveRequest{Key: key, Fingerprint: fpA, Now: now, Lease: lease, TTL: ttl})
					if err != nil || !res.Claimed {
						return fmt.Errorf("Reserve(%q) = %+v, %v", key, res, err)
					}
					done := i%4 == 0
					if done {
						if err := b.store.Complete(c, key, res.Record.Token, idem.Response{Status: 200}, now, now.Add(ttl)); err != nil {
							return err
						}
					}
					made[i] = listed{key, now, done}
				}
				return nil
			}()
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	inM := func(w listed) bool { return strings.HasPrefix(w.key, b.key("m/")) }
	for _, limit := range []int{29, 0, 599, 600, idem.MaxListLimit} {
		f.check(t, c, idem.ListQuery{Prefix: b.key("m/"), Limit: limit}, made, inM)
	}
	f.check(t, c, idem.ListQuery{Prefix: b.key("m/"), Limit: 40, State: idem.StateCompleted}, made,
		func(w listed) bool { return inM(w) && w.done })
	cut := b.base.Add(20 * time.Millisecond)
	f.check(t, c, idem.ListQuery{Prefix: b.key("m/"), Limit: 50, State: idem.StateInProgress, CreatedBefore: cut}, made,
		func(w listed) bool { return inM(w) && !w.done && w.created.Before(cut) })
	f.check(t, c, idem.ListQuery{Prefix: b.key("m/03")}, made, func(w listed) bool {
		return strings.HasPrefix(w.key, b.key("m/03"))
	})
}

// listAsGetReads: records past their TTL, released or deleted are listed exactly as Get reads
// them: present with the ExpiresAt that says they are expired, or absent from both.
func listAsGetReads(t *testing.T, f *listFixture) {
	c := longCtx(t)
	b := f.b
	old := b.base.Add(-3 * ttl)
	k := func(name string) string { return b.key("x/" + name) }
	claim := mustClaim(t, b.store, k("done-old"), fpA, old)
	if err := b.store.Complete(c, k("done-old"), claim.Token, idem.Response{Status: 202}, old, old.Add(ttl)); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, b.store, k("claim-old"), fpA, old)
	claim = mustClaim(t, b.store, k("released"), fpA, b.base)
	if err := b.store.Release(c, k("released"), claim.Token); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, b.store, k("live"), fpA, b.base)
	deleted := false
	if d, ok := b.store.(idem.Deleter); ok {
		mustClaim(t, b.store, k("deleted"), fpA, b.base)
		if err := d.Delete(c, k("deleted")); err != nil {
			t.Fatal(err)
		}
		deleted = true
	}
	page, err := f.l.List(c, idem.ListQuery{Prefix: b.key("x/")})
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]idem.Record{}
	for _, r := range page.Records {
		byKey[r.Key] = r
	}
	for _, name := range []string{"claim-old", "deleted", "done-old", "live", "released"} {
		if name == "deleted" && !deleted {
			continue
		}
		rec, err := b.store.Get(c, k(name))
		r, ok := byKey[k(name)]
		switch {
		case errors.Is(err, idem.ErrNotFound):
			if ok && !r.Expired(b.base) {
				// An expired one may have been deleted since (a storage TTL).
				t.Errorf("%s: listed (%+v) but Get finds no record", name, r)
			}
			if name == "live" {
				t.Errorf("live record not found")
			}
			continue
		case err != nil:
			t.Fatal(err)
		case !ok:
			t.Errorf("%s: Get reads %+v but it is not listed", name, rec)
			continue
		}
		if rec.Response != nil {
			rec.Response = &idem.Response{Status: rec.Response.Status, BodyOmitted: rec.Response.BodyOmitted}
		}
		checkSame(t, "listed "+name, r, rec)
		if expired := r.Expired(b.base); expired != (name != "live") {
			t.Errorf("%s: listed with ExpiresAt %v, Expired = %v", name, r.ExpiresAt, expired)
		}
	}
	if _, ok := byKey[k("deleted")]; ok {
		t.Errorf("a deleted record is listed")
	}
}

// listPagingWhileWriting: 150 records exist throughout; while pages are read, other
// goroutines claim and complete new keys between them and complete or extend the in-progress
// ones. Every page is in key order after the previous, and every record that exists
// throughout is listed exactly once; the others may or may not be.
func listPagingWhileWriting(t *testing.T, f *listFixture) {
	c := longCtx(t)
	b := f.b
	var stable []string
	tokens := map[string]int64{}
	for i := range 150 {
		key := b.key(fmt.Sprintf("w/%03d0", i))
		stable = append(stable, key)
		tokens[key] = mustClaim(t, b.store, key, fpA, b.base).Token
	}
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for w := range 4 {
		go func() {
			errs <- func() error {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return nil
					default:
					}
					key := b.key(fmt.Sprintf("w/%03d%d", (i*37+w*11)%150, 1+w))
					res, err := b.store.Reserve(c, idem.ReserveRequest{Key: key, Fingerprint: fpA, Now: b.base, Lease: lease, TTL: ttl})
					if err != nil {
						return err
					}
					if res.Claimed {
						if err := b.store.Complete(c, key, res.Record.Token, idem.Response{Status: 200}, b.base, b.base.Add(ttl)); err != nil {
							return err
						}
					}
					sk := stable[(i*13+w)%len(stable)]
					if w%2 == 0 {
						err = b.store.Extend(c, sk, tokens[sk], b.base.Add(lease+time.Duration(i)*time.Millisecond))
					} else if i%5 == 0 {
						err = b.store.Complete(c, sk, tokens[sk], idem.Response{Status: 201}, b.base, b.base.Add(ttl))
					}
					if err != nil && !errors.Is(err, idem.ErrLeaseLost) {
						return err
					}
				}
			}()
		}()
	}
	defer func() {
		close(stop)
		for range 4 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	}()
	for round := range 3 {
		seen := map[string]bool{}
		last := ""
		q := idem.ListQuery{Prefix: b.key("w/"), Limit: 25 + round*40}
		for pages := 0; ; pages++ {
			if pages > 1000 {
				t.Fatal("List: more than 1000 pages; the cursor does not advance")
			}
			page, err := f.l.List(c, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Records {
				if r.Key <= last {
					t.Fatalf("round %d: %q listed after %q", round, r.Key, last)
				}
				last = r.Key
				seen[r.Key] = true
			}
			if page.Next == "" {
				break
			}
			q.Cursor = page.Next
		}
		for _, k := range stable {
			if !seen[k] {
				t.Errorf("round %d: %q exists throughout but was not listed", round, k)
			}
		}
	}
}

// listRefusesInvalidQueries: a cursor the store did not make, a negative limit, an unknown
// state and a prefix that is not UTF-8 are refused with idem.ErrInvalidInput.
func listRefusesInvalidQueries(t *testing.T, f *listFixture) {
	c := longCtx(t)
	for _, q := range []idem.ListQuery{
		{Cursor: "not a cursor!"},
		{Limit: -1},
		{State: idem.State(7)},
		{Prefix: "\xff"},
	} {
		if _, err := f.l.List(c, q); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("List(%+v) = %v, want ErrInvalidInput", q, err)
		}
	}
}

// longCtx is ctx with room for the list tests that write and read hundreds of records.
func longCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}
