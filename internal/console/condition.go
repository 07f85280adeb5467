package console

import (
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// Condition names what a record means now for an operator: the same conditions, decided by
// the same rules, as `idem inspect` and `idem release` use.
type Condition string

// The conditions of a record.
const (
	Completed Condition = "completed" // the stored response is replayed to retries
	Running   Condition = "running"   // in progress, its lease live and renewed by its holder
	Held      Condition = "held"      // in progress, an uncertain outcome held until the record's expiry
	Stale     Condition = "stale"     // in progress, its lease run out: the next retry takes over
	Released  Condition = "released"  // released: the next request executes
	Expired   Condition = "expired"   // past its expiry: counts as absent
)

// ConditionOf classifies rec at now. A released claim keeps its record in some stores, with
// its expiry set at or before its creation; the hold policy for uncertain outcomes extends the
// lease to the record's expiry, which a running call's renewals do not reach.
func ConditionOf(rec idem.Record, now time.Time) Condition {
	switch {
	case rec.State == idem.StateInProgress && !rec.ExpiresAt.After(rec.CreatedAt):
		return Released
	case rec.Expired(now):
		return Expired
	case rec.State == idem.StateCompleted:
		return Completed
	case !rec.LeaseUntil.After(now):
		return Stale
	case !rec.LeaseUntil.Before(rec.ExpiresAt):
		return Held
	}
	return Running
}

// DefaultStuckAfter is the age from which a running claim counts as stuck when the operator
// says nothing else: the console's Options.StuckAfter and `idem list --stuck-after` default.
const DefaultStuckAfter = 5 * time.Minute

// Stuck reports whether rec, at now, is a claim an operator should look at: held (an
// uncertain outcome kept until expiry), stale (its lease ran out), or running for after or
// longer since it was created. The console's flag and `idem list --state stuck` both decide
// with it.
func Stuck(rec idem.Record, now time.Time, after time.Duration) bool {
	switch ConditionOf(rec, now) {
	case Held, Stale:
		return true
	case Running:
		return now.Sub(rec.CreatedAt) >= after
	}
	return false
}

// Live reports whether a record in condition c has a live lease: a release would let a retry
// execute while the first call may still act.
func (c Condition) Live() bool { return c == Running || c == Held }

// Explain says what condition c means for the next request with rec's key.
func Explain(c Condition, rec idem.Record, now time.Time) string {
	left := rec.LeaseUntil.Sub(now).Round(time.Second)
	switch c {
	case Running:
		return fmt.Sprintf("running: its holder renews its lease (%s left); retries get 409 until it finishes", left)
	case Held:
		return fmt.Sprintf("held: the outcome was uncertain and is kept until expiry (%s), or a call that long is still running; retries get 409", left)
	case Stale:
		return fmt.Sprintf("stale: its lease ran out %s ago (holder gone, or an uncertain outcome left to expire); the next retry takes over", -left)
	case Released:
		return "released: the next request with this key executes"
	case Expired:
		return "expired: counts as absent; the next request with this key executes"
	}
	return "completed: retries get the stored response"
}

// Starts returns how many times rec's effect was started, across releases and takeovers
// (Record.Starts, or Attempts for a record its store wrote before counting starts).
func Starts(rec idem.Record) int { return max(rec.Starts, rec.Attempts) }
