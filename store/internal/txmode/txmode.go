// Package txmode holds what the SQL stores' transaction modes (DoTx and TxRunner in pgstore,
// mysqlstore and sqlitestore) share and that does not depend on the database: the answer to a
// duplicate from the record it found, the retry loop of DoTx, the defaults of TxOptions, and
// TxRunner's workings (Runner). Each store keeps its own transaction, claim and error
// classification, and its exported names and their documentation.
package txmode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/storeerr"
)

// Retries bounds the re-runs of a DoTx whose transaction the database aborted as a
// serialization failure or a deadlock: nothing of it committed, so a re-run is safe.
const Retries = 5

// DefaultWait is TxOptions.Wait's default.
const DefaultWait = 10 * time.Second

// DefaultTTL is the default of the stores' Options.TxTTL.
const DefaultTTL = 24 * time.Hour

// Defaults fills in the stores' Options.TxTTL (DefaultTTL when 0) and Options.Now (time.Now
// when nil). Each store checks the TTL with its other options.
func Defaults(ttl time.Duration, now func() time.Time) (time.Duration, func() time.Time) {
	if now == nil {
		now = time.Now
	}
	return cmp.Or(ttl, DefaultTTL), now
}

// Func is a DoTx function over a transaction of type T.
type Func[T any] func(ctx context.Context, tx T) (idem.Response, error)

// Attempt is one transaction of a DoTx running fn; retry reports an abort that a new attempt
// may get past.
type Attempt[T any] func(fn Func[T]) (res idem.Result, retry bool, err error)

// Retry runs attempt until it asks for no retry, at most Retries more times.
func Retry[T any](attempt Attempt[T], fn Func[T]) (idem.Result, error) {
	for n := 0; ; n++ {
		res, retry, err := attempt(fn)
		if !retry || n == Retries {
			return res, err
		}
	}
}

// DoTx is a store's DoTx: once ready (the store open, ctx not done) and given a function, it
// runs fn through attempt, retried as Retry does. A nil fn is an error wrapping
// idem.ErrInvalidInput, prefixed with pkg, the store's package name.
func DoTx[T any](ctx context.Context, pkg string, ready func(context.Context) error, fn Func[T], attempt Attempt[T]) (idem.Result, error) {
	if err := ready(ctx); err != nil {
		return idem.Result{}, err
	}
	if fn == nil {
		return idem.Result{}, storeerr.Invalid(pkg, "nil function")
	}
	return Retry(attempt, fn)
}

// Settings fills in a TxOptions' defaults: policy idem.DefaultPolicy; wait DefaultWait when
// 0, and 0 (no bound but the context's deadline) when negative.
func Settings(policy idem.Policy, wait time.Duration) (idem.Policy, time.Duration) {
	if policy == nil {
		policy = idem.DefaultPolicy
	}
	switch {
	case wait == 0:
		wait = DefaultWait
	case wait < 0:
		wait = 0
	}
	return policy, wait
}

// Answer answers a DoTx from a record it did not claim: a replay when it is completed with
// fingerprint, idem.ErrMismatch for another fingerprint, an *idem.InFlightError while an
// engine holds it.
func Answer(rec *idem.Record, fingerprint string, now time.Time) (idem.Result, bool, error) {
	if rec.Fingerprint != fingerprint {
		return idem.Result{}, false, fmt.Errorf("%w (key %.80q)", idem.ErrMismatch, rec.Key)
	}
	if rec.State != idem.StateCompleted {
		// Round up to whole seconds, as the engine does: Retry-After has second resolution.
		after := max(time.Second, (rec.LeaseUntil.Sub(now)+time.Second-1)/time.Second*time.Second)
		return idem.Result{}, false, &idem.InFlightError{Key: rec.Key, RetryAfter: after}
	}
	var resp idem.Response
	if rec.Response != nil {
		resp = *rec.Response
	}
	return idem.Result{Response: resp, Replayed: true, Kept: true, ExpiresAt: rec.ExpiresAt}, false, nil
}

// WaitEnded is the error of a duplicate whose wait for a concurrent transaction with its key
// ran out: TxRunner answers it as in flight, to be retried in a second.
func WaitEnded(key string) error {
	return &idem.InFlightError{Key: key, RetryAfter: time.Second}
}

// errRollback carries fn's outcome out of a transaction the policy rolls back.
var errRollback = errors.New("rolled back by policy")

// Run is TxRunner.Run: once ready (the store open, ctx not done) and given a function, it
// runs fn through attempt, with the transaction in fn's context under ctxKey (where the
// store's TxFromContext looks), commits what policy keeps and rolls back the rest. It returns
// what DoTx returns, and, when the policy rolled fn's transaction back, a Result with fn's
// response (Executed true, Kept false) and fn's error. fn runs at most once: an abort after it
// ran is returned, not retried. A panic in fn rolls the transaction back (the attempt's
// deferred rollback) and goes on.
func Run[T any](ctx context.Context, ready func(context.Context) error, policy idem.Policy, fn idem.Func, ctxKey any, attempt Attempt[T]) (idem.Result, error) {
	if err := ready(ctx); err != nil {
		return idem.Result{}, err
	}
	if fn == nil {
		return idem.Result{}, fmt.Errorf("%w: nil function", idem.ErrInvalidInput)
	}
	var (
		ran  bool
		resp idem.Response
		ferr error
	)
	txfn := func(ctx context.Context, tx T) (idem.Response, error) {
		ran = true
		resp, ferr = fn(context.WithValue(ctx, ctxKey, tx))
		if ferr != nil || policy(resp, ferr) != idem.DispositionKeep {
			return resp, errRollback
		}
		return resp, nil
	}
	for n := 0; ; n++ {
		res, retry, err := attempt(txfn)
		if errors.Is(err, errRollback) {
			return idem.Result{Response: resp, Executed: true}, ferr
		}
		if !retry || ran || n == Retries {
			if err == nil && ran {
				res.Executed = true
			}
			return res, err
		}
	}
}
