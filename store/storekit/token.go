package storekit

import "time"

// NextToken returns the fencing token for a new claim of a key whose previous token was prev
// (0 when the key has no record). Tokens are Unix microseconds at the claim, or prev+1 when
// that is larger, so they grow with every claim of a key and a key recreated after a sweep does
// not reuse the token of an old holder. They fit exactly in a float64 (Lua, JSON numbers).
func NextToken(prev int64, now time.Time) int64 {
	return max(prev+1, now.UnixMicro())
}
