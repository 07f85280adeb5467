package txmode

import (
	"context"
	"time"

	"github.com/idemkit/idem"
)

// Store is what a TxRunner needs of its store, over the store's transaction type T.
type Store[T any] struct {
	// Ready fails when the store is closed or the context is done.
	Ready func(context.Context) error
	// TTL and Now are the store's Options.TxTTL and Options.Now.
	TTL time.Duration
	Now func() time.Time
	// CtxKey is where the store's TxFromContext looks for the transaction in fn's context.
	CtxKey any
	// Attempt is one transaction running fn for call, as a TxRunner runs it: the claim keeps
	// call's route and request; a wait for a concurrent holder of call.Key that ends after
	// wait (0: only at ctx's deadline), or at ctx's deadline, is an *idem.InFlightError (see
	// WaitEnded).
	Attempt func(ctx context.Context, call idem.Call, wait time.Duration, fn Func[T]) (idem.Result, bool, error)
}

// Runner is a store's TxRunner without its exported face: each store's TxRunner holds one
// and documents its methods, which call Runner's.
type Runner[T any] struct {
	st     Store[T]
	policy idem.Policy
	wait   time.Duration
}

// NewRunner returns the Runner of a TxRunner over st with a TxOptions' Policy and Wait,
// defaults filled in by Settings.
func NewRunner[T any](st Store[T], policy idem.Policy, wait time.Duration) Runner[T] {
	r := Runner[T]{st: st}
	r.policy, r.wait = Settings(policy, wait)
	return r
}

// Options is TxRunner.Options: Policy, TTL and Now; the other fields are zero.
func (r *Runner[T]) Options() idem.Options {
	return idem.Options{Policy: r.policy, TTL: r.st.TTL, Now: r.st.Now}
}

// Run is TxRunner.Run: the package's Run with the store's attempt for call, bounded by the
// runner's wait.
func (r *Runner[T]) Run(ctx context.Context, call idem.Call, fn idem.Func) (idem.Result, error) {
	return Run(ctx, r.st.Ready, r.policy, fn, r.st.CtxKey, func(fn Func[T]) (idem.Result, bool, error) {
		return r.st.Attempt(ctx, call, r.wait, fn)
	})
}

// FromContext is TxFromContext: the transaction of type T under key in ctx (where Run puts
// it), or T's zero value outside one.
func FromContext[T any](ctx context.Context, key any) T {
	tx, _ := ctx.Value(key).(T)
	return tx
}
