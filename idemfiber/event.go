package idemfiber

import "time"

// Outcome says what the middleware did with a request. Its values are short, stable,
// lowercase labels, fit for metrics, and mean what the same words mean in idemhttp.Outcome.
type Outcome string

// The outcomes of Event.
const (
	// OutcomeExecuted: the handler ran and its response is stored for replay.
	OutcomeExecuted Outcome = "executed"
	// OutcomeReleased: the handler ran and returned an error before it began to answer, or a
	// response the runner's Policy does not keep (by default 5xx, 401, 403, 408, 409, 425,
	// 429): the key is released and a retry runs it again.
	OutcomeReleased Outcome = "released"
	// OutcomeUncertain: the handler failed or panicked after it began to answer: the claim is
	// held as the engine's idem.UncertainPolicy says.
	OutcomeUncertain Outcome = "uncertain"
	// OutcomeOversize: the handler ran and its response body was larger than
	// Options.MaxResponseBody: the record is kept without it.
	OutcomeOversize Outcome = "oversize"
	// OutcomeReplay: the stored response was replayed; the handler did not run.
	OutcomeReplay Outcome = "replay"
	// OutcomeInFlight: another request with the key is in flight: 409.
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeMismatch: the key was used with another request: 422.
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeBypass: the request went to the handler without protection: its method is not
	// processed, or it has no key and Options.RequireKey is false.
	OutcomeBypass Outcome = "bypass"
	// OutcomeStoreError: the store failed before the handler ran: 503, nothing was done.
	OutcomeStoreError Outcome = "store_error"
	// OutcomeInvalidKey: 400: the key is malformed or sent twice.
	OutcomeInvalidKey Outcome = "invalid_key"
	// OutcomeInvalidScope: 400: Options.Scope could not name the caller.
	OutcomeInvalidScope Outcome = "invalid_scope"
	// OutcomeMissingKey: 400: a key is required.
	OutcomeMissingKey Outcome = "missing_key"
	// OutcomeError: 500, an unexpected error, or the client went away while its request
	// waited for the original.
	OutcomeError Outcome = "error"
)

// Event describes one request the middleware saw, for metrics and logs. It is passed to
// Options.OnEvent by value, once per request, as the middleware returns (a request whose
// handler panics reports nothing: the panic goes on).
type Event struct {
	// Outcome is what happened.
	Outcome Outcome
	// Key is the client's key, "" when there is none or it is invalid.
	Key string
	// Status is the response's status as the middleware returns; a handler's error is
	// answered after it, by Fiber's error handler.
	Status int
	// Start is when the middleware received the request.
	Start time.Time
	// Duration is the time spent in the middleware, the handler included.
	Duration time.Duration
	// Takeover is true when the handler ran after taking over a claim whose holder died.
	Takeover bool
	// Err is the error behind a store_error or error outcome, the handler's error, or the
	// error that kept a response from being stored (idem.ErrLeaseLost or a store error: the
	// client still got the response).
	Err error
}
