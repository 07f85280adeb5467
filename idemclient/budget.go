package idemclient

import "sync"

// RetryBudget is a retry budget shared by every request of one or more Transports: a token bucket
// from which each retry takes one token and to which each request that succeeds at its first
// attempt gives back a fraction. When a server struggles, retries stop once the bucket is empty
// and resume as requests succeed again, so a fleet of clients does not multiply the load.
// It is safe for concurrent use.
type RetryBudget struct {
	mu       sync.Mutex
	tokens   float64
	capacity float64
	refill   float64
}

// NewRetryBudget returns a full bucket of capacity tokens; each first-attempt success adds refill
// tokens (up to capacity). NewRetryBudget(100, 0.1) lets retries be at most about 10% of traffic once
// the first 100 are spent.
func NewRetryBudget(capacity, refill float64) *RetryBudget {
	return &RetryBudget{tokens: capacity, capacity: capacity, refill: refill}
}

// take removes a token for a retry and reports whether there was one.
func (b *RetryBudget) take() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// succeed credits a first-attempt success.
func (b *RetryBudget) succeed() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.tokens = min(b.capacity, b.tokens+b.refill)
	b.mu.Unlock()
}

// Tokens returns the tokens left.
func (b *RetryBudget) Tokens() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens
}
