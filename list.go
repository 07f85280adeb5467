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
