package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// list checks idem.Lister: paging returns each record once, in key order; the state, age and
// prefix filters; an empty listing; a cursor given to another query; bad queries refused.
func (s suite) list(t *testing.T, b *bundle) {
	l, ok := b.store.(idem.Lister)
	if !ok {
		t.Skip("storetest: store does not implement idem.Lister; List tests skipped")
	}
	c := ctx(t)
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
		for _, r := range got {
			gotKeys = append(gotKeys, r.Key)
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
