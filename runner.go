package idem

import "context"

// Runner runs fn at most once per key or replays its stored response. It is what every face
// takes, in a field named Runner (idemhttp.Options, idemgrpc.ServerOptions, idemlambda.Options
// and ProxyOptions, idemfiber.Options, consumer.Options). *Engine is one: it claims the key in
// the store, runs fn and completes the record, each step on its own. Others run the claim,
// fn's writes and the completion in one database transaction (pgstore.TxRunner,
// mysqlstore.TxRunner, sqlitestore.TxRunner), which makes transaction mode available on every
// face.
//
// Do has Engine.Do's contract: the executed or replayed Result and a nil error; an error
// matching ErrMismatch, ErrInFlight or ErrStoreUnavailable when fn did not run; or fn's error.
//
// Options reports the options the runner applies, with defaults filled in: a face reads
// Policy (which responses are kept), TTL (how long they are replayed, for an expiry header)
// and Now from it, so that what it tells a caller agrees with what the runner stores.
type Runner interface {
	Do(ctx context.Context, key, fingerprint string, fn Func) (Result, error)
	Options() Options
}

var _ Runner = (*Engine)(nil)
