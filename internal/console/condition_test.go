package console_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
)

// Stuck is held, stale, or running for at least the given age; never released, expired or
// completed, however old.
func TestStuck(t *testing.T) {
	const after = time.Minute
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	inProgress := func(created, leaseUntil, expires time.Time) idem.Record {
		return idem.Record{Key: "k", State: idem.StateInProgress, CreatedAt: created, LeaseUntil: leaseUntil, ExpiresAt: expires}
	}
	for _, tc := range []struct {
		name  string
		rec   idem.Record
		stuck bool
	}{
		{"running, young", inProgress(now.Add(-after+time.Microsecond), now.Add(time.Second), now.Add(time.Hour)), false},
		{"running, exactly the age", inProgress(now.Add(-after), now.Add(time.Second), now.Add(time.Hour)), true},
		{"running, old", inProgress(now.Add(-time.Hour), now.Add(time.Second), now.Add(time.Hour)), true},
		{"held", inProgress(now, now.Add(time.Hour), now.Add(time.Hour)), true},
		{"stale", inProgress(now, now, now.Add(time.Hour)), true},
		{"released", inProgress(now.Add(-time.Hour), time.Time{}, time.Time{}), false},
		{"expired", inProgress(now.Add(-2*time.Hour), now.Add(-2*time.Hour), now.Add(-time.Hour)), false},
		{"completed, old", idem.Record{Key: "k", State: idem.StateCompleted, CreatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)}, false},
	} {
		if got := console.Stuck(tc.rec, now, after); got != tc.stuck {
			t.Errorf("%s (%s): Stuck = %t, want %t", tc.name, console.ConditionOf(tc.rec, now), got, tc.stuck)
		}
	}
}
