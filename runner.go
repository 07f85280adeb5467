package idem

import "context"

// Call is one request to a Runner: the key to claim, the fingerprint that identifies what is
// asked under it, and what to keep with the record for operators. New fields may be added; a
// caller that does not set one keeps working as before.
type Call struct {
	// Key is the scoped storage key (1 to MaxStorageKeyLen bytes of UTF-8 without NUL), as
	// for Engine.Do.
	Key string
	// Fingerprint identifies the request (see Fingerprint), as for Engine.Do: the key used
	// with another fingerprint is ErrMismatch.
	Fingerprint string
	// Route names what claims the key, for operators, such as "POST /v1/orders/{id}/pay":
	// stored in the record's Route when the key is claimed and shown by `idem list` and the
	// operator console. It takes no part in the contract: the key and the fingerprint decide
	// what is a duplicate, never the route. The runner makes it valid UTF-8 without NUL bytes
	// (each invalid byte and each NUL becomes U+FFFD) and cuts it to at most MaxRouteLen
	// bytes at a rune boundary. Empty: the record carries no route.
	Route string
	// Request is what the client sent, kept with the record when the key is claimed (see
	// Record.Request); nil keeps none. It is kept as given: the caller redacts credentials
	// and bounds its size first.
	Request *Request
}

// Runner runs fn at most once per key or replays its stored response. It is what every face
// takes, in a field named Runner (idemhttp.Options, idemgrpc.ServerOptions, idemlambda.Options
// and ProxyOptions, idemfiber.Options, consumer.Options). *Engine is one: it claims the key in
// the store, runs fn and completes the record, each step on its own. Others run the claim,
// fn's writes and the completion in one database transaction (pgstore.TxRunner,
// mysqlstore.TxRunner, sqlitestore.TxRunner), which makes transaction mode available on every
// face.
//
// Run takes the Call a face builds: the key and fingerprint, and the route and request the
// record keeps for operators. It has Engine.Run's contract: the executed or replayed Result
// and a nil error; an error matching ErrMismatch, ErrInFlight or ErrStoreUnavailable when fn
// did not run; or fn's error. A later field of Call is not a breaking change, and nothing a
// runner needs travels in the context.
//
// Options reports the options the runner applies, with defaults filled in: a face reads
// Policy (which responses are kept), TTL (how long they are replayed, for an expiry header)
// and Now from it, so that what it tells a caller agrees with what the runner stores.
type Runner interface {
	Run(ctx context.Context, call Call, fn Func) (Result, error)
	Options() Options
}

var _ Runner = (*Engine)(nil)
