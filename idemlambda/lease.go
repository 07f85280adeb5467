package idemlambda

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// DefaultLeaseMargin is the default Options.LeaseMargin and ProxyOptions.LeaseMargin: how long
// after the invocation's deadline its claim still holds.
//
// The margin does not have to cover the handler running late: Lambda ends an invocation at its
// deadline (the function is stopped and its execution environment reset; nothing of the handler
// runs on after it). What it covers is clock error. The deadline comes from the Lambda service,
// in whole milliseconds (Lambda-Runtime-Deadline-Ms); the claim's lease end is computed from it
// on the instance that ran the handler; and the retry, on any instance, compares it with its own
// clock. Lambda's hosts keep their clocks with the Amazon Time Sync Service, whose error is in
// the order of a millisecond, so 500 ms covers that, the truncation to milliseconds and a
// scheduling pause with room to spare, while a retry sent right after a timeout waits half a
// second for the key, not seconds (give the engine a Wait of a second or more and the retry is
// served rather than refused with idem.ErrInFlight). Raise it where clocks are not kept (a
// Runtime API emulator on another machine, a function whose effects outlive the invocation, such
// as an asynchronous call it started).
const DefaultLeaseMargin = 500 * time.Millisecond

// A claim made in an invocation is bounded by the invocation: Lambda puts its deadline in the
// handler's context, and stops the function when it is reached. So the lease a claim takes (and
// every extension while the handler runs) is at most the time left before the deadline plus
// LeaseMargin, and never more than the engine's own Options.Lease:
//
//	lease = min(engine lease, deadline + margin − now)
//
// The upper bound matters when the invocation is killed at its timeout: nothing will ever
// complete or release its claim, and the retry Lambda (or the client) sends must not find the
// key in flight for a full engine lease after the function is gone. The margin matters the
// other way: the claim must not become free while the handler may still run, and the instance
// that handles the retry reads its own clock (see DefaultLeaseMargin). A function that returns
// normally completes or releases its claim first, so the bound only shows for invocations that
// die.

// bound is one invocation's limit on its claim, carried to the store through the context, and
// what the store said when the claim was released.
type bound struct {
	until    time.Time             // deadline + margin; zero: not bounded
	ended    atomic.Bool           // the handler returned: extensions are no longer capped
	released atomic.Pointer[error] // the Release that failed
}

type boundKey struct{}

// boundedStore caps the leases the engine asks for by the invocation's bound, when the context
// carries one, and keeps a failed Release's error in it.
type boundedStore struct{ idem.Store }

func (s boundedStore) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	req.Lease = s.lease(ctx, req.Now, req.Lease)
	return s.Store.Reserve(ctx, req)
}

// Release releases the claim and, if that fails for another reason than a lost lease (the key
// is someone else's now, nothing to report), keeps the error for the invocation to return.
func (s boundedStore) Release(ctx context.Context, key string, token int64) error {
	err := s.Store.Release(ctx, key, token)
	if b, ok := ctx.Value(boundKey{}).(*bound); ok && err != nil && !errors.Is(err, idem.ErrLeaseLost) {
		b.released.Store(&err)
	}
	return err
}

// lease caps a claim's lease by the invocation's bound, when the context carries one.
func (boundedStore) lease(ctx context.Context, now time.Time, lease time.Duration) time.Duration {
	if b, ok := ctx.Value(boundKey{}).(*bound); ok && !b.until.IsZero() {
		if left := b.until.Sub(now); left < lease {
			lease = max(left, time.Millisecond)
		}
	}
	return lease
}

// Extend caps the extensions made until the handler returns: the engine's renewal of a claim
// that landed late, before the handler starts, and the heartbeats while it runs. An extension
// after it returned (the engine holding an uncertain outcome until the record expires) is left
// as the engine asks.
func (s boundedStore) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if b, ok := ctx.Value(boundKey{}).(*bound); ok && !b.until.IsZero() && !b.ended.Load() && until.After(b.until) {
		until = b.until
	}
	return s.Store.Extend(ctx, key, token, until)
}

// leaser is an engine over the same store and options as the user's, whose claims are bounded
// by each invocation's deadline, and whose cache (if the user's engine has one) is filled as
// results are stored.
type leaser struct {
	eng    idem.Runner
	margin time.Duration // negative: not bounded
}

// newLeaser bounds the claims of an *idem.Engine by the invocation's deadline; any other
// Runner (a transactional one) keeps its own lease and is used as it is.
func newLeaser(r idem.Runner, margin time.Duration) (*leaser, error) {
	eng, ok := r.(*idem.Engine)
	if !ok {
		return &leaser{eng: r, margin: -1}, nil
	}
	if margin == 0 {
		margin = DefaultLeaseMargin
	}
	opt := eng.Options()
	opt.CacheOnComplete = true // a function instance that stored a result answers its duplicates
	inner, err := idem.New(boundedStore{eng.Store()}, opt)
	if err != nil {
		return nil, optionError("Options.Runner", "cannot be bounded by the invocation deadline: %v", err)
	}
	return &leaser{eng: inner, margin: margin}, nil
}

// bind returns ctx carrying the invocation's bound (its deadline plus the margin, if it has a
// deadline and the margin is not negative), and the bound.
func (l *leaser) bind(ctx context.Context) (context.Context, *bound) {
	b := &bound{}
	if d, ok := ctx.Deadline(); ok && l.margin >= 0 {
		b.until = d.Add(l.margin)
	}
	return context.WithValue(ctx, boundKey{}, b), b
}

// run returns the function that marks the handler's end: extensions are capped until then.
func (b *bound) run() func() {
	return func() { b.ended.Store(true) }
}

// joinRelease returns err, joined with an error matching ErrReleaseFailed if the claim could not
// be released.
func (b *bound) joinRelease(err error) error {
	if err == nil {
		return nil
	}
	if r := b.released.Load(); r != nil {
		return errors.Join(err, fmt.Errorf("%w: %v", ErrReleaseFailed, *r))
	}
	return err
}
