package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/txmode"
)

// TxOptions configure a TxRunner. The zero value is a safe default.
type TxOptions struct {
	// Policy decides, from fn's response and error, whether the transaction commits: Keep
	// with a nil error commits fn's writes together with the record, so the response is
	// replayed; anything else (Release, Hold, or an error) rolls everything back and keeps
	// nothing, so a retry executes. Default idem.DefaultPolicy, which rolls back 5xx, 401, 403,
	// 408, 409, 425 and 429.
	Policy idem.Policy
	// Wait bounds how long a duplicate waits for the transaction of a concurrent request with
	// its key to end, before it returns an *idem.InFlightError (idem.ErrInFlight) with a
	// RetryAfter of one second. The wait also ends at the context's deadline, with the same
	// error. Default 10s; negative: only the context's deadline bounds it.
	Wait time.Duration
}

// TxRunner is an idem.Runner whose Run runs fn in the same PostgreSQL transaction as the
// claim and the completion, as DoTx does. fn reaches the transaction through its context,
// with TxFromContext, and writes through it alone. Give it to idemhttp.Options.Runner to run
// HTTP handlers this way.
//
// A duplicate that arrives while fn runs waits until the first transaction ends (at most
// TxOptions.Wait or its context's deadline, then idem.ErrInFlight), then replays the
// committed response, or claims the key itself if the first rolled back. Unlike DoTx, Run never
// runs fn a second time: a serialization failure or deadlock after fn ran rolls back and
// returns an *idem.StoreError, and a retry of the request executes.
type TxRunner struct{ r txmode.Runner[pgx.Tx] }

var _ idem.Runner = (*TxRunner)(nil)

// NewTxRunner returns a TxRunner over st; its records are the ones engines and DoTx on st
// use, so all of them see each other's keys.
func NewTxRunner(st *Store, opt TxOptions) *TxRunner {
	return &TxRunner{txmode.NewRunner(txmode.Store[pgx.Tx]{
		Ready: st.ready, TTL: st.opt.TxTTL, Now: st.opt.Now, CtxKey: txKey{},
		Attempt: func(ctx context.Context, call idem.Call, wait time.Duration, fn txmode.Func[pgx.Tx]) (idem.Result, bool, error) {
			return st.doTx(ctx, call, fn, &txWait{lock: wait})
		},
	}, opt.Policy, opt.Wait)}
}

// Options returns the settings middlewares read from a Runner: Policy, TTL (the store's
// Options.TxTTL) and Now. The other fields are zero.
func (r *TxRunner) Options() idem.Options {
	return r.r.Options()
}

type txKey struct{}

// TxFromContext returns the transaction a TxRunner runs fn in, or nil outside one.
func TxFromContext(ctx context.Context) pgx.Tx {
	return txmode.FromContext[pgx.Tx](ctx, txKey{})
}

// Run implements idem.Runner: the claim keeps call.Route (cleaned as idem.Call says) and
// call.Request, and it returns what DoTx returns, and, when the policy rolled back fn's
// transaction, a Result with fn's response (Executed true, Kept false) and fn's error. A panic
// in fn rolls the transaction back and goes on.
func (r *TxRunner) Run(ctx context.Context, call idem.Call, fn idem.Func) (idem.Result, error) {
	return r.r.Run(ctx, call, fn)
}

// Do is Run's short form, for a call that keeps no route and no request with the record:
// Run(ctx, idem.Call{Key: key, Fingerprint: fingerprint}, fn).
func (r *TxRunner) Do(ctx context.Context, key, fingerprint string, fn idem.Func) (idem.Result, error) {
	return r.r.Run(ctx, idem.Call{Key: key, Fingerprint: fingerprint}, fn)
}
