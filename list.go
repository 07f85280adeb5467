package idem

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"time"
	"unicode/utf8"
)

// Lister is implemented by stores that can list their records for operators (`idem list`, an
// operator console). It is not part of the contract the engine uses, and it is no snapshot: a
// page reflects the store at the moment it was read, and records claimed, completed or deleted
// between pages may or may not appear.
//
// Listing is bounded and served by an index: records come in storage-key order (byte order),
// at most Limit of them per page, found through the key's primary index (SQL stores), so a key
// prefix is a range of that index and a cursor is a position in it. State and age are checked
// record by record along that range: a page asks for at most Limit matching records, but a
// filter that matches few of them may read many. memstore scans its records under its lock.
//
// Listed records are every stored record, expired and released ones included (their ExpiresAt
// says so, as with Get), but they are light: a completed record's Response holds only Status
// and BodyOmitted, never headers or body bytes.
type Lister interface {
	List(ctx context.Context, q ListQuery) (ListPage, error)
}

// DefaultListLimit is the page size of a ListQuery whose Limit is 0; MaxListLimit is the
// largest page a store returns (a larger Limit is lowered to it).
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListQuery selects the records a Lister returns. The zero value lists the first
// DefaultListLimit records of any state.
type ListQuery struct {
	// State keeps only records in this state; 0 keeps every state.
	State State
	// CreatedBefore keeps only records whose CreatedAt is before it (older records); the zero
	// time keeps every age.
	CreatedBefore time.Time
	// Prefix keeps only records whose storage key starts with it: a scope's hash and the
	// separator, then the start of a client's key. It must be valid UTF-8.
	Prefix string
	// Limit is the most records a page holds: 0 means DefaultListLimit, more than MaxListLimit
	// means MaxListLimit; negative is invalid.
	Limit int
	// Cursor resumes a listing: the ListPage.Next of the previous page, or "" for the first
	// page. A cursor is a position in key order, not bound to its query: given with another
	// query it lists that query's records after the same key, which is harmless. A cursor
	// that is not one a Lister returned is refused with ErrInvalidInput.
	Cursor string
}

// ListPage is one page of a listing.
type ListPage struct {
	// Records are the page's records, in storage-key order, light (see Lister).
	Records []Record
	// Next is the cursor of the next page, or "" when this page is the last.
	Next string
}

// ListBounds is a checked ListQuery as stores use it: the page size, the key range to read,
// and the bounds of the filters in Unix microseconds. A store reads the keys k with
// After < k (when HasAfter), From <= k, and k < To (when To is not ""), in key order.
type ListBounds struct {
	// Limit is the page size, between 1 and MaxListLimit.
	Limit int
	// After is the key the cursor stands at; the page starts after it. Valid when HasAfter.
	After    string
	HasAfter bool
	// From and To bound the key prefix: From is the prefix, To the first string after every
	// key with that prefix, or "" when the range is unbounded above.
	From, To string
	// State is the state to keep, 0 for any.
	State State
	// CreatedBefore is the Unix microsecond a record's CreatedAt must be before, or 0 for any.
	CreatedBefore int64
}

// Bounds checks q and returns its bounds. Errors wrap ErrInvalidInput.
func (q ListQuery) Bounds() (ListBounds, error) {
	b := ListBounds{Limit: q.Limit, State: q.State, From: q.Prefix}
	switch {
	case q.Limit < 0:
		return b, invalid("list limit %d is negative", q.Limit)
	case q.Limit == 0:
		b.Limit = DefaultListLimit
	case q.Limit > MaxListLimit:
		b.Limit = MaxListLimit
	}
	if q.State != 0 && q.State != StateInProgress && q.State != StateCompleted {
		return b, invalid("list state %v", q.State)
	}
	if !utf8.ValidString(q.Prefix) {
		return b, invalid("list prefix is not valid UTF-8")
	}
	b.To = prefixEnd(q.Prefix)
	if !q.CreatedBefore.IsZero() {
		b.CreatedBefore = q.CreatedBefore.UnixMicro()
	}
	if q.Cursor != "" {
		k, err := base64.RawURLEncoding.DecodeString(q.Cursor)
		if err != nil || len(k) == 0 || !utf8.Valid(k) {
			return b, invalid("list cursor %.40q is not a cursor", q.Cursor)
		}
		b.After, b.HasAfter = string(k), true
	}
	return b, nil
}

// Match reports whether a record with this key, state and CreatedAt (Unix microseconds) is in
// the listing, after the cursor. Stores that scan use it; SQL stores say the same in SQL.
func (b ListBounds) Match(key string, state State, created int64) bool {
	return (!b.HasAfter || key > b.After) && key >= b.From && (b.To == "" || key < b.To) &&
		(b.State == 0 || state == b.State) && (b.CreatedBefore == 0 || created < b.CreatedBefore)
}

// Page returns the page of recs, which a store read in key order with at most Limit+1 of them:
// the first Limit, and the cursor after the last of them if there were more.
func (b ListBounds) Page(recs []Record) ListPage {
	if len(recs) <= b.Limit {
		return ListPage{Records: recs}
	}
	recs = recs[:b.Limit]
	return ListPage{Records: recs, Next: ListCursor(recs[len(recs)-1].Key)}
}

// ListCursor returns the cursor that resumes a listing after key.
func ListCursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// prefixEnd returns the smallest string greater than every string that starts with p, in
// byte order, as valid UTF-8 (its last rune incremented), or "" if there is none (p is empty
// or made of the largest rune only).
func prefixEnd(p string) string {
	for p != "" {
		r, size := utf8.DecodeLastRuneInString(p)
		p = p[:len(p)-size]
		switch {
		case r == utf8.MaxRune:
			continue
		case r == 0xD7FF: // the surrogates are not runes: the next one is U+E000
			r = 0xE000
		default:
			r++
		}
		return p + string(r)
	}
	return ""
}

// ListResponseHeadLen is how many bytes of an encoded response DecodeResponseHead needs at
// most: stores that list read only this much of a stored response.
const ListResponseHeadLen = 12

// ListedRecord completes a record that a store's listing read with its key, state, token,
// attempts and times set: from head, the first ListResponseHeadLen bytes of its stored
// response, and completed, its completion time in Unix microseconds (0: none). It fails with
// ErrCorruptRecord for an unknown state or a head that cannot be read. The SQL stores share it.
func ListedRecord(r *Record, head []byte, completed int64) error {
	switch r.State {
	case StateInProgress:
		return nil
	case StateCompleted:
		resp, err := DecodeResponseHead(head)
		if err != nil {
			return fmt.Errorf("record %.80q: %w", r.Key, err)
		}
		r.Response = &resp
		if completed != 0 {
			r.CompletedAt = time.UnixMicro(completed)
		}
		return nil
	}
	return fmt.Errorf("record %.80q: %w: unknown state %d", r.Key, ErrCorruptRecord, r.State)
}

// DecodeResponseHead decodes the status and BodyOmitted flag from the first bytes of a
// response encoded by EncodeResponse (at least ListResponseHeadLen of them, or all of it).
// The result has no headers and no body. It fails with ErrCorruptRecord.
func DecodeResponseHead(b []byte) (Response, error) {
	if len(b) < 3 || b[0] != codecV1 {
		return Response{}, ErrCorruptRecord
	}
	st, n := binary.Uvarint(b[2:])
	if n <= 0 || st > 999 {
		return Response{}, fmt.Errorf("%w: status", ErrCorruptRecord)
	}
	return Response{Status: int(st), BodyOmitted: b[1]&1 != 0}, nil
}
