package idemhttp

import "sync/atomic"

// DefaultMemoryBudget is the least default Options.MemoryBudget: 64 MiB.
const DefaultMemoryBudget = 64 << 20

// Budget is a memory budget: the bytes of request and response buffers that the requests in
// flight may hold together (Options.MemoryBudget). A middleware has one of its own unless
// Options.Budget gives it one to share, so that several middlewares — one per route, say — are
// bounded together. Charging and returning bytes is one atomic add each: no lock on the request
// path. Make one with NewBudget.
type Budget struct {
	limit int64 // negative: unlimited, nothing is counted
	used  atomic.Int64
}

// NewBudget returns a budget of limit bytes: DefaultMemoryBudget if limit is 0, unlimited if it
// is negative.
func NewBudget(limit int64) *Budget {
	if limit == 0 {
		limit = DefaultMemoryBudget
	}
	return &Budget{limit: limit}
}

// InUse returns the bytes charged to the budget now (0 for an unlimited budget, which counts
// nothing), fit for a metrics gauge.
func (b *Budget) InUse() int64 { return b.used.Load() }

// Limit returns the budget's size in bytes, negative if it is unlimited.
func (b *Budget) Limit() int64 { return b.limit }

// take charges n more bytes to a request that holds *held bytes already, and adds them to
// *held. It refuses, charging nothing, when the total would pass the limit, unless the request
// would then be the only holder: a request alone is always served, so a budget smaller than
// one request's needs serves such requests one at a time rather than never.
func (b *Budget) take(held *int64, n int64) bool {
	if b.limit < 0 || n <= 0 {
		return true
	}
	t := b.used.Add(n)
	if t > b.limit && t != *held+n {
		b.used.Add(-n)
		return false
	}
	*held += n
	return true
}

// give returns all the bytes a request holds.
func (b *Budget) give(held *int64) {
	if *held != 0 {
		b.used.Add(-*held)
		*held = 0
	}
}
