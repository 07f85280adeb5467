package storekit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// Bounds accepts no state, in progress and completed, and no other; Match takes records after
// the cursor only, and created strictly before CreatedBefore.
func TestListBoundsStateAndMatch(t *testing.T) {
	for _, st := range []idem.State{0, idem.StateInProgress, idem.StateCompleted} {
		if _, err := storekit.Bounds(idem.ListQuery{State: st}); err != nil {
			t.Errorf("Bounds with state %v: %v", st, err)
		}
	}
	for _, st := range []idem.State{idem.StateCompleted + 1, 255} {
		if _, err := storekit.Bounds(idem.ListQuery{State: st}); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("Bounds with state %v = %v, want ErrInvalidInput", st, err)
		}
	}
	b, err := storekit.Bounds(idem.ListQuery{Cursor: storekit.ListCursor("k2")})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"k1": false, "k2": false, "k3": true} {
		if got := b.Match(key, idem.StateCompleted, 1); got != want {
			t.Errorf("after cursor k2, Match(%q) = %t, want %t", key, got, want)
		}
	}
	b = storekit.ListBounds{CreatedBefore: 100}
	for created, want := range map[int64]bool{99: true, 100: false, 101: false} {
		if got := b.Match("k", idem.StateCompleted, created); got != want {
			t.Errorf("CreatedBefore 100, Match(created %d) = %t, want %t", created, got, want)
		}
	}
	if !(storekit.ListBounds{}).Match("k", idem.StateInProgress, 5) {
		t.Error("empty bounds do not match a record")
	}
	b = storekit.ListBounds{State: idem.StateInProgress}
	for st, want := range map[idem.State]bool{idem.StateInProgress: true, idem.StateCompleted: false} {
		if got := b.Match("k", st, 1); got != want {
			t.Errorf("state in progress, Match(state %v) = %t, want %t", st, got, want)
		}
	}
}

// Page keeps the first Limit records read, with a cursor after the last of them only when
// the store read more than Limit.
func TestListBoundsPage(t *testing.T) {
	b, err := storekit.Bounds(idem.ListQuery{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	recs := []idem.Record{{Key: "a"}, {Key: "b"}, {Key: "c"}}
	if p := b.Page(recs[:2]); len(p.Records) != 2 || p.Next != "" {
		t.Errorf("Page of exactly Limit records = %d records, cursor %q; want 2, none", len(p.Records), p.Next)
	}
	if p := b.Page(recs); len(p.Records) != 2 || p.Records[1].Key != "b" || p.Next != storekit.ListCursor("b") {
		t.Errorf("Page of Limit+1 records = %+v, cursor %q; want a, b and the cursor after b", p.Records, p.Next)
	}
	if p := b.Page(nil); len(p.Records) != 0 || p.Next != "" {
		t.Errorf("Page of nothing = %+v", p)
	}
}

func TestListBoundsPrefixRange(t *testing.T) {
	for _, tc := range []struct{ prefix, to string }{
		{"", ""},
		{"ab", "ac"},
		{"a\x7f", "a\u0080"},
		{"a\u00ff", "a\u0100"},
		{"a\ud7ff", "a\ue000"},
		{"a\U0010ffff", "b"},
		{"\U0010ffff\U0010ffff", ""},
	} {
		b, err := storekit.Bounds(idem.ListQuery{Prefix: tc.prefix})
		if err != nil || b.From != tc.prefix || b.To != tc.to {
			t.Errorf("Bounds(prefix %q) = [%q, %q), %v; want [%q, %q)", tc.prefix, b.From, b.To, err, tc.prefix, tc.to)
		}
		// Every key with the prefix is in the range; the end itself is not.
		for _, k := range []string{tc.prefix, tc.prefix + "\x01", tc.prefix + "\U0010ffff\U0010ffff"} {
			if !b.Match(k, idem.StateInProgress, 0) {
				t.Errorf("prefix %q: key %q is out of its range", tc.prefix, k)
			}
		}
		if tc.to != "" && b.Match(tc.to, idem.StateInProgress, 0) {
			t.Errorf("prefix %q: %q is in its range", tc.prefix, tc.to)
		}
	}
}

func TestListCursorRoundTrip(t *testing.T) {
	key := "scope\x1fk\u00e9y/with+slash="
	b, err := storekit.Bounds(idem.ListQuery{Cursor: storekit.ListCursor(key), Limit: 5000})
	if err != nil || !b.HasAfter || b.After != key || b.Limit != idem.MaxListLimit {
		t.Fatalf("Bounds = %+v, %v", b, err)
	}
	if b.Match(key, idem.StateCompleted, 0) || !b.Match(key+"x", idem.StateCompleted, 0) {
		t.Error("a cursor must resume strictly after its key")
	}
	for _, c := range []string{"***", storekit.ListCursor("\xff")} {
		if _, err := storekit.Bounds(idem.ListQuery{Cursor: c}); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("cursor %q: %v, want ErrInvalidInput", c, err)
		}
	}
}

func TestDecodeResponseHead(t *testing.T) {
	full := storekit.EncodeResponse(idem.Response{Status: 503, Header: map[string][]string{"A": {"b"}}, Body: []byte(strings.Repeat("x", 100)), BodyOmitted: true})
	r, err := storekit.DecodeResponseHead(full[:storekit.ListResponseHeadLen])
	if err != nil || r.Status != 503 || !r.BodyOmitted || r.Header != nil || r.Body != nil {
		t.Fatalf("DecodeResponseHead = %+v, %v", r, err)
	}
	r, err = storekit.DecodeResponseHead(storekit.EncodeResponse(idem.Response{}))
	if err != nil || r.Status != 0 || r.BodyOmitted {
		t.Fatalf("DecodeResponseHead(empty response) = %+v, %v", r, err)
	}
	// Three bytes hold the head of a status below 128; 999 is the largest status.
	for _, st := range []int{100, 999} {
		enc := storekit.EncodeResponse(idem.Response{Status: st})
		head := enc[:min(len(enc), 3+st/128)]
		if r, err := storekit.DecodeResponseHead(head); err != nil || r.Status != st {
			t.Errorf("DecodeResponseHead(%x) = %+v, %v; want status %d", head, r, err, st)
		}
	}
	// A status whose varint is cut short is corrupt, not 0.
	cut := storekit.EncodeResponse(idem.Response{Status: 201})[:3]
	for _, b := range [][]byte{nil, {1}, {2, 0, 200}, {1, 0, 0xff}, cut} {
		if _, err := storekit.DecodeResponseHead(b); !errors.Is(err, idem.ErrCorruptRecord) {
			t.Errorf("DecodeResponseHead(%x) = %v, want ErrCorruptRecord", b, err)
		}
	}
}

// TestFillListed checks the completion of a listed row: an in-progress record is left as
// read, a completed one gets its status and completion time, and an unknown state or an
// unreadable response head is a corrupt record.
func TestFillListed(t *testing.T) {
	t.Parallel()
	r := idem.Record{Key: "k", State: idem.StateInProgress}
	if err := storekit.FillListed(&r, nil, 0); err != nil || r.Response != nil || !r.CompletedAt.IsZero() {
		t.Fatalf("in progress: %v %+v", err, r)
	}
	head := storekit.EncodeResponse(idem.Response{Status: 201, Body: []byte("a body")})
	if len(head) > storekit.ListResponseHeadLen {
		head = head[:storekit.ListResponseHeadLen]
	}
	at := time.UnixMicro(1_700_000_000_000_000)
	r = idem.Record{Key: "k", State: idem.StateCompleted}
	if err := storekit.FillListed(&r, head, at.UnixMicro()); err != nil || r.Response == nil || r.Response.Status != 201 || !r.CompletedAt.Equal(at) {
		t.Fatalf("completed: %v %+v", err, r)
	}
	r = idem.Record{Key: "k", State: idem.State(9)}
	if err := storekit.FillListed(&r, head, 0); !errors.Is(err, idem.ErrCorruptRecord) {
		t.Errorf("unknown state: %v", err)
	}
	r = idem.Record{Key: "k", State: idem.StateCompleted}
	if err := storekit.FillListed(&r, []byte{0xff}, 0); err == nil {
		t.Errorf("unreadable head accepted")
	}
}
