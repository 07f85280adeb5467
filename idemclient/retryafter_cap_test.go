package idemclient

import (
	"testing"
	"time"
)

// TestRetryAfterCapped: a Retry-After in seconds too large for a time.Duration does not
// overflow into a negative or tiny pause (a retry at once, a storm); it is capped at 2^30
// seconds, which the request's deadline and the client's budget then bound.
func TestRetryAfterCapped(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, v := range []string{"1073741825", "9223372037", "10000000000", "18446744073", "9223372036854775807"} {
		d, ok := retryAfter(v, now)
		if !ok || d != (1<<30)*time.Second {
			t.Errorf("Retry-After %s: %s, %v; want %s", v, d, ok, (1<<30)*time.Second)
		}
	}
}
