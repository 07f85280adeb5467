package idemhttp

import "sync/atomic"

// DefaultMemoryBudget is the least default Options.MemoryBudget: 64 MiB.
const DefaultMemoryBudget = 64 << 20

// memBudget counts the bytes of request and response buffers that the requests in flight
// hold (Options.MemoryBudget). Charging and returning bytes is one atomic add each: no lock
// on the request path.
type memBudget struct {
	limit int64 // negative: unlimited, nothing is counted
	used  atomic.Int64
}

// take charges n more bytes to a request that holds *held bytes already, and adds them to
// *held. It refuses, charging nothing, when the total would pass the limit, unless the request
// would then be the only holder: a request alone is always served, so a budget smaller than
// one request's needs serves such requests one at a time rather than never.
func (b *memBudget) take(held *int64, n int64) bool {
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
func (b *memBudget) give(held *int64) {
	if *held != 0 {
		b.used.Add(-*held)
		*held = 0
	}
}
