package storekit_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem/store/storekit"
)

// A new token is above the old one even when the clock is behind it, and follows the clock
// otherwise.
func TestNextToken(t *testing.T) {
	now := time.UnixMicro(1_000_000)
	if got := storekit.NextToken(5_000_000, now); got != 5_000_001 {
		t.Errorf("NextToken after 5000000 with the clock at 1000000 = %d, want 5000001", got)
	}
	if got := storekit.NextToken(10, now); got != 1_000_000 {
		t.Errorf("NextToken after 10 with the clock at 1000000 = %d, want 1000000", got)
	}
}
