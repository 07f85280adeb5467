package storekit

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// ListBounds is a checked idem.ListQuery as stores use it: the page size, the key range to read,
// and the bounds of the filters in Unix microseconds. In key order a store reads the keys k
// with After < k (when HasAfter), From <= k, and k < To (when To is not ""), in key order.
// Newest first (Newest) it reads the records by descending (CreatedAt, key), after the
// position (AfterCreated, After) when HasAfter, and keeps those of the key range.
type ListBounds struct {
	// Limit is the page size, between 1 and idem.MaxListLimit.
	Limit int
	// Newest is true for idem.ListNewestFirst.
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
	State idem.State
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

// Bounds checks q and returns its bounds. Errors wrap idem.ErrInvalidInput.
func Bounds(q idem.ListQuery) (ListBounds, error) {
	b := ListBounds{Limit: q.Limit, State: q.State, From: q.Prefix, Route: q.Route, Status: q.Status, Newest: q.Order == idem.ListNewestFirst}
	switch {
	case q.Limit < 0:
		return b, invalid("list limit %d is negative", q.Limit)
	case q.Limit == 0:
		b.Limit = idem.DefaultListLimit
	case q.Limit > idem.MaxListLimit:
		b.Limit = idem.MaxListLimit
	}
	if q.State != 0 && q.State != idem.StateInProgress && q.State != idem.StateCompleted {
		return b, invalid("list state %v", q.State)
	}
	if q.Order != idem.ListByKey && q.Order != idem.ListNewestFirst {
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
func (b ListBounds) Match(key string, state idem.State, created int64) bool {
	return b.afterCursor(key, created) && key >= b.From && (b.To == "" || key < b.To) &&
		(b.State == 0 || state == b.State) && (b.CreatedBefore == 0 || created < b.CreatedBefore) &&
		(!b.HasSince || created >= b.CreatedSince)
}

// MatchRecord reports whether r, as a listing reads it (see idem.Lister), is in the listing
// after the cursor: Match, and its route and response status.
func (b ListBounds) MatchRecord(r *idem.Record) bool {
	return b.Match(r.Key, r.State, r.CreatedAt.UnixMicro()) && (b.Route == "" || r.Route == b.Route) &&
		(b.Status == 0 || r.State == idem.StateCompleted && r.Response != nil && r.Response.Status == b.Status)
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
func (b ListBounds) Page(recs []idem.Record) idem.ListPage {
	if len(recs) <= b.Limit {
		return idem.ListPage{Records: recs}
	}
	recs = recs[:b.Limit]
	last := recs[len(recs)-1]
	if b.Newest {
		return idem.ListPage{Records: recs, Next: NewestCursor(last.Key, last.CreatedAt)}
	}
	return idem.ListPage{Records: recs, Next: ListCursor(last.Key)}
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

// FillListed completes a record that a store's listing read with its key, state, token,
// attempts and times set: from head, the first ListResponseHeadLen bytes of its stored
// response, and completed, its completion time in Unix microseconds (0: none). It fails with
// idem.ErrCorruptRecord for an unknown state or a head that cannot be read.
func FillListed(r *idem.Record, head []byte, completed int64) error {
	switch r.State {
	case idem.StateInProgress:
		return nil
	case idem.StateCompleted:
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
	return fmt.Errorf("record %.80q: %w: unknown state %d", r.Key, idem.ErrCorruptRecord, r.State)
}

// DecodeResponseHead decodes the status and BodyOmitted flag from the first bytes of a
// response encoded by EncodeResponse (at least ListResponseHeadLen of them, or all of it).
// The result has no headers and no body. It fails with idem.ErrCorruptRecord.
func DecodeResponseHead(b []byte) (idem.Response, error) {
	if len(b) < 3 || b[0] != codecV1 {
		return idem.Response{}, idem.ErrCorruptRecord
	}
	st, n := binary.Uvarint(b[2:])
	if n <= 0 || st > 999 {
		return idem.Response{}, fmt.Errorf("%w: status", idem.ErrCorruptRecord)
	}
	return idem.Response{Status: int(st), BodyOmitted: b[1]&1 != 0}, nil
}

// invalid returns an error wrapping idem.ErrInvalidInput that says what is wrong.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{idem.ErrInvalidInput}, args...)...)
}
