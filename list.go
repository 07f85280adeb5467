package idem

import (
	"context"
	"time"
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
// under its lock. Every store of this module lists in both orders (the conformance suite,
// storetest, checks both); a Lister of another that cannot list newest first refuses it with
// an error matching errors.ErrUnsupported.
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
