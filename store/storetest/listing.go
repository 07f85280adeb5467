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

// list checks idem.Lister: paging returns each record once, in key order, also across many
// records written concurrently; the state, age and prefix filters; an empty listing; a cursor
// given to another query; bad queries refused; expired, released and deleted records listed
// as Get reads them; and paging while other goroutines write keeps every record that exists
// throughout, once, in order.
func (s suite) list(t *testing.T, b *bundle) {
	l, ok := b.store.(idem.Lister)
	if !ok {
		t.Skip("storetest: store does not implement idem.Lister; List tests skipped")
	}
	c := longCtx(t)
	// 24 records under the prefix "p/", one per millisecond, every third completed (with
	// a body the listing must not carry), plus keys just outside the prefix on both sides
	// and a unicode key at its end.
	type want struct {
		key     string
		created time.Time
		done    bool
	}
	var all []want
	add := func(key string, i int, done bool) {
		now := b.base.Add(time.Duration(i) * time.Millisecond)
		claim := mustClaim(t, b.store, key, fpA, now)
		if done {
			resp := idem.Response{Status: 201 + i, Header: map[string][]string{"X": {"y"}}, Body: []byte("body"), BodyOmitted: i%2 == 0}
			if err := b.store.Complete(c, key, claim.Token, resp, now, now.Add(window)); err != nil {
				t.Fatal(err)
			}
		}
		all = append(all, want{key, now, done})
	}
	for i := range 24 {
		add(b.key(fmt.Sprintf("p/%02d", 23-i)), i, i%3 == 0) // key order is not creation order
	}
	add(b.key("p/\u00e9t\u00e9"), 24, true)
	add(b.key("p."), 25, false) // '.' sorts just before '/', '0' just after
	add(b.key("p0"), 26, true)
	inPrefix := func(w want) bool { return len(w.key) > len(b.key("p/")) && w.key[:len(b.key("p/"))] == b.key("p/") }

	// listAll pages through q and checks each page.
	listAll := func(t *testing.T, q idem.ListQuery) []idem.Record {
		t.Helper()
		var got []idem.Record
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatal("List: more than 100 pages; the cursor does not advance")
			}
			page, err := l.List(c, q)
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
	// check compares a listing with the records of all that keep says belong to it.
	check := func(t *testing.T, q idem.ListQuery, keep func(want) bool) {
		t.Helper()
		var keys []string
		for _, w := range all {
			if keep(w) {
				keys = append(keys, w.key)
			}
		}
		slices.Sort(keys)
		got := listAll(t, q)
		var gotKeys []string
		for i, r := range got {
			gotKeys = append(gotKeys, r.Key)
			if len(got) > 100 && i%10 != 0 {
				continue // long listings: every tenth record is compared with Get
			}
			full := mustGet(t, b.store, r.Key)
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

	t.Run("PagesInKeyOrderOnce", func(t *testing.T) {
		for _, limit := range []int{1, 5, 12, 25, 0} {
			check(t, idem.ListQuery{Prefix: b.key("p/"), Limit: limit}, inPrefix)
		}
		// No prefix: the store's every record (each subtest has a store of its own).
		check(t, idem.ListQuery{Limit: 10}, func(want) bool { return true })
	})
	t.Run("State", func(t *testing.T) {
		check(t, idem.ListQuery{Prefix: b.key("p/"), State: idem.StateInProgress, Limit: 4},
			func(w want) bool { return inPrefix(w) && !w.done })
		check(t, idem.ListQuery{Prefix: b.key("p/"), State: idem.StateCompleted, Limit: 3},
			func(w want) bool { return inPrefix(w) && w.done })
	})
	t.Run("CreatedBefore", func(t *testing.T) {
		cut := b.base.Add(10 * time.Millisecond) // strictly before: record 10 is out
		check(t, idem.ListQuery{Prefix: b.key("p/"), CreatedBefore: cut, Limit: 4},
			func(w want) bool { return inPrefix(w) && w.created.Before(cut) })
		check(t, idem.ListQuery{Prefix: b.key("p/"), CreatedBefore: cut, State: idem.StateCompleted},
			func(w want) bool { return inPrefix(w) && w.created.Before(cut) && w.done })
	})
	t.Run("Prefix", func(t *testing.T) {
		check(t, idem.ListQuery{Prefix: b.key("p/1")}, func(w want) bool {
			return len(w.key) >= len(b.key("p/1")) && w.key[:len(b.key("p/1"))] == b.key("p/1")
		})
		check(t, idem.ListQuery{Prefix: b.key("p/\u00e9")}, func(w want) bool { return w.key == b.key("p/\u00e9t\u00e9") })
		check(t, idem.ListQuery{Prefix: b.key("p"), Limit: 7}, func(want) bool { return true })
	})
	t.Run("Empty", func(t *testing.T) {
		page, err := l.List(c, idem.ListQuery{Prefix: b.key("none/")})
		if err != nil || len(page.Records) != 0 || page.Next != "" {
			t.Fatalf("List of an empty prefix = %+v, %v; want no records, no cursor", page, err)
		}
		page, err = l.List(c, idem.ListQuery{Prefix: b.key("p/"), CreatedBefore: b.base})
		if err != nil || len(page.Records) != 0 || page.Next != "" {
			t.Fatalf("List of nothing old enough = %+v, %v; want no records, no cursor", page, err)
		}
	})
	t.Run("CursorOfAnotherQuery", func(t *testing.T) {
		// A cursor is a position in key order: another query resumes after the same key.
		first, err := l.List(c, idem.ListQuery{Prefix: b.key("p/"), Limit: 6})
		if err != nil || first.Next == "" {
			t.Fatalf("List: %+v, %v", first, err)
		}
		after := first.Records[5].Key
		check(t, idem.ListQuery{Prefix: b.key("p/"), State: idem.StateCompleted, Cursor: first.Next},
			func(w want) bool { return inPrefix(w) && w.done && w.key > after })
		// A cursor past the prefix's range lists nothing, harmlessly.
		page, err := l.List(c, idem.ListQuery{Prefix: b.key("p/0"), Cursor: first.Next, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			if r.Key <= after || r.Key[:len(b.key("p/0"))] != b.key("p/0") {
				t.Errorf("List with a foreign cursor returned %q", r.Key)
			}
		}
	})
	t.Run("ManyRecords", func(t *testing.T) {
		c = longCtx(t) // a deadline of its own: this one writes and reads many records
		// 600 records written by 8 goroutines, so that a store that merges several
		// partitions of its keys meets partitions of many records.
		const n, writers = 600, 8
		made := make([]want, n)
		errs := make(chan error, writers)
		for w := range writers {
			go func() {
				errs <- func() error {
					for i := w; i < n; i += writers {
						key := b.key(fmt.Sprintf("m/%04d", (i*7919)%n)) // written out of key order
						now := b.base.Add(time.Duration(i%50) * time.Millisecond)
						res, err := b.store.Reserve(c, idem.ReserveRequest{Key: key, Fingerprint: fpA, Now: now, Lease: lease, TTL: window})
						if err != nil || !res.Claimed {
							return fmt.Errorf("Reserve(%q) = %+v, %v", key, res, err)
						}
						done := i%4 == 0
						if done {
							if err := b.store.Complete(c, key, res.Record.Token, idem.Response{Status: 200}, now, now.Add(window)); err != nil {
								return err
							}
						}
						made[i] = want{key, now, done}
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
		all = append(all, made...)
		inM := func(w want) bool { return strings.HasPrefix(w.key, b.key("m/")) }
		for _, limit := range []int{29, 0, 599, 600, idem.MaxListLimit} {
			check(t, idem.ListQuery{Prefix: b.key("m/"), Limit: limit}, inM)
		}
		check(t, idem.ListQuery{Prefix: b.key("m/"), Limit: 40, State: idem.StateCompleted},
			func(w want) bool { return inM(w) && w.done })
		cut := b.base.Add(20 * time.Millisecond)
		check(t, idem.ListQuery{Prefix: b.key("m/"), Limit: 50, State: idem.StateInProgress, CreatedBefore: cut},
			func(w want) bool { return inM(w) && !w.done && w.created.Before(cut) })
		check(t, idem.ListQuery{Prefix: b.key("m/03")}, func(w want) bool {
			return strings.HasPrefix(w.key, b.key("m/03"))
		})
	})
	t.Run("ExpiredReleasedDeleted", func(t *testing.T) {
		c = longCtx(t) // a deadline of its own: this one writes and reads many records
		// Records past their window, released or deleted are listed exactly as Get reads
		// them: present with the ExpiresAt that says they are expired, or absent from both.
		old := b.base.Add(-3 * window)
		k := func(name string) string { return b.key("x/" + name) }
		claim := mustClaim(t, b.store, k("done-old"), fpA, old)
		if err := b.store.Complete(c, k("done-old"), claim.Token, idem.Response{Status: 202}, old, old.Add(window)); err != nil {
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
		page, err := l.List(c, idem.ListQuery{Prefix: b.key("x/")})
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]idem.Record{}
		for _, r := range page.Records {
			listed[r.Key] = r
		}
		for _, name := range []string{"claim-old", "deleted", "done-old", "live", "released"} {
			if name == "deleted" && !deleted {
				continue
			}
			rec, err := b.store.Get(c, k(name))
			r, ok := listed[k(name)]
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
		if _, ok := listed[k("deleted")]; ok {
			t.Errorf("a deleted record is listed")
		}
	})
	t.Run("PagingWhileWriting", func(t *testing.T) {
		c = longCtx(t) // a deadline of its own: this one writes and reads many records
		// 150 records exist throughout; while pages are read, other goroutines claim and
		// complete new keys between them and complete or extend the in-progress ones. Every
		// page is in key order after the previous, and every record that exists throughout
		// is listed exactly once; the others may or may not be.
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
						res, err := b.store.Reserve(c, idem.ReserveRequest{Key: key, Fingerprint: fpA, Now: b.base, Lease: lease, TTL: window})
						if err != nil {
							return err
						}
						if res.Claimed {
							if err := b.store.Complete(c, key, res.Record.Token, idem.Response{Status: 200}, b.base, b.base.Add(window)); err != nil {
								return err
							}
						}
						sk := stable[(i*13+w)%len(stable)]
						if w%2 == 0 {
							err = b.store.Extend(c, sk, tokens[sk], b.base.Add(lease+time.Duration(i)*time.Millisecond))
						} else if i%5 == 0 {
							err = b.store.Complete(c, sk, tokens[sk], idem.Response{Status: 201}, b.base, b.base.Add(window))
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
				page, err := l.List(c, q)
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
	})
	t.Run("InvalidQueries", func(t *testing.T) {
		for _, q := range []idem.ListQuery{
			{Cursor: "not a cursor!"},
			{Limit: -1},
			{State: idem.State(7)},
			{Prefix: "\xff"},
		} {
			if _, err := l.List(c, q); !errors.Is(err, idem.ErrInvalidInput) {
				t.Errorf("List(%+v) = %v, want ErrInvalidInput", q, err)
			}
		}
	})
}

// longCtx is ctx with room for the list tests that write and read hundreds of records.
func longCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}
