package idem

import "context"

// Runner runs fn at most once per key or replays its stored response. *Engine is one: it
// claims the key in the store, runs fn and completes the record, each step on its own. Others
// run the claim, fn's writes and the completion in one database transaction (for PostgreSQL,
// pgstore.TxRunner). Middlewares that accept a Runner (idemhttp.Options.Runner) work with
// either.
//
// Do has Engine.Do's contract: the executed or replayed Result and a nil error; an error
// matching ErrMismatch, ErrInFlight or ErrStoreUnavailable when fn did not run; or fn's error.
type Runner interface {
	Do(ctx context.Context, key, fingerprint string, fn Func) (Result, error)
}

var _ Runner = (*Engine)(nil)
