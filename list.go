package idem

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Lister is implemented by stores that can list their records for operators (`idem list`, an
// operator console). It is not part of the contract the engine uses, and it is no snapshot: a
// page reflects the store at the moment it was read, and records claimed, completed or deleted
// between pages may or may not appear.
//
// Listing is bounded and served by an index, in one of two orders (ListQuery.Order). In key
// order, records come in storage-key order (byte order), at most Limit of them per page, found
// through the key's primary index (SQL stores), so a key prefix is a range of that index and a
// cursor is a position in it. Newest first, records come by creation time (CreatedAt, the
// first claim), the newest of the whole store first, found through an index on the creation
// time, so a time range is a range of that index and a cursor is a (time, key) position in
// it; records created in the same microsecond come in descending key order. The other filters
// are checked record by record along the range: a page asks for at most Limit matching
// records, but a filter that matches few of them may read many. memstore scans its records
// under its lock.
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

// ListOrder is the order in which a Lister returns records.
type ListOrder uint8

const (
	// ListByKey lists records in storage-key order (byte order): the zero value.
	ListByKey ListOrder = iota
	// ListNewestFirst lists records by creation time (Record.CreatedAt), the newest of the
	// whole listing first; records created in the same microsecond come in descending key
	// order.
	ListNewestFirst
)

// ListQuery selects the records a Lister returns. The zero value lists the first
// DefaultListLimit records of any state, in key order.
type ListQuery struct {
	// Order is the order of the records: ListByKey (the default) or ListNewestFirst.
	Order ListOrder
	// State keeps only records in this state; 0 keeps every state.
	State State
	// CreatedBefore keeps only records whose CreatedAt is before it (older records); the zero
	// time keeps every age.
	CreatedBefore time.Time
	// CreatedSince keeps only records whose CreatedAt is at or after it (newer records); the
	// zero time keeps every age. With CreatedBefore it makes a time range.
	CreatedSince time.Time
	// Route keeps only records claimed with exactly this route (Record.Route); "" keeps every
	// route.
	Route string
	// Status keeps only completed records whose response has this status; 0 keeps every
	// record. It must be between 0 and 999.
	Status int
	// Prefix keeps only records whose storage key starts with it: a scope's hash and the
	// separator, then the start of a client's key. It must be valid UTF-8.
	Prefix string
	// Limit is the most records a page holds: 0 means DefaultListLimit, more than MaxListLimit
	// means MaxListLimit; negative is invalid.
	Limit int
	// Cursor resumes a listing: the ListPage.Next of the previous page, or "" for the first
	// page. A cursor is a position in its order (a key, or a creation time and a key), not
	// bound to the rest of its query: given with other filters it lists that query's records
	// after the same position, which is harmless. A cursor of the other order, or one that is
	// not one a Lister returned, is refused with ErrInvalidInput.
	Cursor string
}

// ListPage is one page of a listing.
type ListPage struct {
	// Records are the page's records, in the query's order, light (see Lister).
	Records []Record
	// Next is the cursor of the next page, or "" when this page is the last.
	Next string
}

// ListBounds is a checked ListQuery as stores use it: the page size, the key range to read,
// and the bounds of the filters in Unix microseconds. In key order a store reads the keys k
// with After < k (when HasAfter), From <= k, and k < To (when To is not ""), in key order.
// Newest first (Newest) it reads the records by descending (CreatedAt, key), after the
// position (AfterCreated, After) when HasAfter, and keeps those of the key range.
type ListBounds struct {
	// Limit is the page size, between 1 and MaxListLimit.
	Limit int
	// Newest is true for ListNewestFirst.
	Newest bool
	// After is the key the cursor stands at; the page starts after it. Valid when HasAfter.
	After    string
	HasAfter bool
	// AfterCreated is the creation time (Unix microseconds) the cursor stands at, newest
	// first: the page holds the records created before it, and those created in the same
	// microsecond whose key is below After. Valid when HasAfter and Newest.
	AfterCreated int64
	// From and To bound the key prefix: From is the prefix, To the first string after every
	// key with that prefix, or "" when the range is unbounded above.
	From, To string
	// State is the state to keep, 0 for any.
	State State
	// CreatedBefore is the Unix microsecond a record's CreatedAt must be before, or 0 for any.
	CreatedBefore int64
	// CreatedSince is the Unix microsecond a record's CreatedAt must be at or after, valid when
	// HasSince.
	CreatedSince int64
	HasSince     bool
	// Route is the route to keep, "" for any.
	Route string
	// Status is the response status to keep (completed records only), 0 for any.
	Status int
}

// Bounds checks q and returns its bounds. Errors wrap ErrInvalidInput.
func (q ListQuery) Bounds() (ListBounds, error) {
	b := ListBounds{Limit: q.Limit, State: q.State, From: q.Prefix, Route: q.Route, Status: q.Status, Newest: q.Order == ListNewestFirst}
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
	if q.Order != ListByKey && q.Order != ListNewestFirst {
		return b, invalid("list order %d", q.Order)
	}
	if q.Status < 0 || q.Status > 999 {
		return b, invalid("list status %d", q.Status)
	}
	if !utf8.ValidString(q.Prefix) {
		return b, invalid("list prefix is not valid UTF-8")
	}
	if !utf8.ValidString(q.Route) {
		return b, invalid("list route is not valid UTF-8")
	}
	b.To = prefixEnd(q.Prefix)
	if !q.CreatedBefore.IsZero() {
		b.CreatedBefore = q.CreatedBefore.UnixMicro()
	}
	if !q.CreatedSince.IsZero() {
		b.CreatedSince, b.HasSince = q.CreatedSince.UnixMicro(), true
	}
	if q.Cursor != "" {
		c, newest := strings.CutPrefix(q.Cursor, newestCursor)
		k, err := base64.RawURLEncoding.DecodeString(c)
		if newest && err == nil && len(k) > 8 {
			b.AfterCreated, k = int64(binary.BigEndian.Uint64(k)), k[8:]
		}
		if err != nil || len(k) == 0 || !utf8.Valid(k) || newest && len(k) == len(c) {
			return b, invalid("list cursor %.40q is not a cursor", q.Cursor)
		}
		if newest != b.Newest {
			return b, invalid("list cursor %.40q is a cursor of the other order", q.Cursor)
		}
		b.After, b.HasAfter = string(k), true
	}
	return b, nil
}

// newestCursor starts the cursors of newest-first listings; the base64 of a key-order cursor
// never holds it.
const newestCursor = "~"

// Match reports whether a record with this key, state and CreatedAt (Unix microseconds) is in
// the listing, after the cursor, as far as these tell (see MatchRecord for the rest). Stores
// that scan use it; SQL stores say the same in SQL.
func (b ListBounds) Match(key string, state State, created int64) bool {
	return b.afterCursor(key, created) && key >= b.From && (b.To == "" || key < b.To) &&
		(b.State == 0 || state == b.State) && (b.CreatedBefore == 0 || created < b.CreatedBefore) &&
		(!b.HasSince || created >= b.CreatedSince)
}

// MatchRecord reports whether r, as a listing reads it (see Lister), is in the listing after
// the cursor: Match, and its route and response status.
func (b ListBounds) MatchRecord(r *Record) bool {
	return b.Match(r.Key, r.State, r.CreatedAt.UnixMicro()) && (b.Route == "" || r.Route == b.Route) &&
		(b.Status == 0 || r.State == StateCompleted && r.Response != nil && r.Response.Status == b.Status)
}

// afterCursor reports whether the record of key, created at created, comes after the cursor.
func (b ListBounds) afterCursor(key string, created int64) bool {
	switch {
	case !b.HasAfter:
		return true
	case b.Newest:
		return created < b.AfterCreated || created == b.AfterCreated && key < b.After
	}
	return key > b.After
}

// Before reports whether, in the listing's order, the record (key, created) comes before the
// record (key2, created2).
func (b ListBounds) Before(key string, created int64, key2 string, created2 int64) bool {
	if b.Newest {
		return created > created2 || created == created2 && key > key2
	}
	return key < key2
}

// Page returns the page of recs, which a store read in the listing's order with at most
// Limit+1 of them: the first Limit, and the cursor after the last of them if there were more.
func (b ListBounds) Page(recs []Record) ListPage {
	if len(recs) <= b.Limit {
		return ListPage{Records: recs}
	}
	recs = recs[:b.Limit]
	last := recs[len(recs)-1]
	if b.Newest {
		return ListPage{Records: recs, Next: NewestCursor(last.Key, last.CreatedAt)}
	}
	return ListPage{Records: recs, Next: ListCursor(last.Key)}
}

// ListCursor returns the cursor that resumes a key-order listing after key.
func ListCursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// NewestCursor returns the cursor that resumes a newest-first listing after the record of key
// created at created.
func NewestCursor(key string, created time.Time) string {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(key)), uint64(created.UnixMicro()))
	return newestCursor + base64.RawURLEncoding.EncodeToString(append(b, key...))
}

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
