package idemhttp

import (
	"net/http"
	"time"
)

// Outcome says what the middleware did with a request. Its values are short, stable strings,
// fit for a metrics label.
type Outcome string

// The outcomes of Event.
const (
	// OutcomeExecuted: the handler ran and its response is stored for replay.
	OutcomeExecuted Outcome = "executed"
	// OutcomeReleased: the handler ran and the policy did not keep its response (by default
	// 5xx, 401, 403, 408, 409, 425, 429), or it panicked before it began to answer, or it
	// called MarkFailed: the key is released and a retry executes.
	OutcomeReleased Outcome = "released"
	// OutcomeUncertain: the handler ran and called MarkUncertain, or panicked (or aborted)
	// after it began to answer: the claim is held as the engine's idem.UncertainPolicy says.
	OutcomeUncertain Outcome = "uncertain"
	// OutcomeOversize: the handler ran and its response was larger than
	// Options.MaxResponseBody: it was streamed to the client and the record kept without the
	// body, so a retry gets ProblemNotRetained and never a second execution.
	OutcomeOversize Outcome = "oversize"
	// OutcomeReplay: the stored response was replayed; the handler did not run.
	OutcomeReplay Outcome = "replay"
	// OutcomeInFlight: another request with the key is in flight: 409 (ProblemInFlight).
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeMismatch: the key was used with another request: 422 (ProblemMismatch).
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeBypass: the request was passed to the handler without protection: its method is
	// not processed, or it has no key on a route where the key is optional.
	OutcomeBypass Outcome = "bypass"
	// OutcomeFailOpen: the store failed and Options.FailOpen let the request through without
	// protection (logged at Warn).
	OutcomeFailOpen Outcome = "fail_open"
	// OutcomeStoreError: the store failed before the handler ran: 503
	// (ProblemStoreUnavailable), nothing was done.
	OutcomeStoreError Outcome = "store_error"
	// OutcomeOverloaded: the request's body would have taken the memory the middleware holds
	// over Options.MemoryBudget: 503 (ProblemOverloaded) with Retry-After, nothing was done.
	OutcomeOverloaded Outcome = "overloaded"
	// OutcomeInvalidKey: 400, ProblemInvalidKey: the key (in the header, or in the body with
	// JSONKey or FuncKey) is malformed or sent twice.
	OutcomeInvalidKey Outcome = "invalid_key"
	// OutcomeInvalidScope: 400, ProblemInvalidScope: Options.Scope could not name the caller.
	OutcomeInvalidScope Outcome = "invalid_scope"
	// OutcomeInvalidBody: 400, ProblemInvalidBody: the body could not be read (the client
	// stopped sending it, or the connection broke) or Options.Fingerprint refused it.
	OutcomeInvalidBody Outcome = "invalid_body"
	// OutcomeMissingKey: 400, ProblemMissingKey.
	OutcomeMissingKey Outcome = "missing_key"
	// OutcomeTooLarge: 413, ProblemRequestTooLarge.
	OutcomeTooLarge Outcome = "too_large"
	// OutcomeError: 500 (ProblemInternal), an unexpected error, or the client went away while
	// its request waited for the original.
	OutcomeError Outcome = "error"
)

// Event describes one request the middleware saw, for metrics and tracing. It is passed to
// Options.OnEvent by value after the response is written; Request must not be kept after the
// callback returns.
type Event struct {
	// Outcome is what happened.
	Outcome Outcome
	// Request is the request (its body already consumed).
	Request *http.Request
	// Key is the client's key, "" when there is none or it is invalid.
	Key string
	// Status is the status sent to the client; 0 if the handler panicked after it started
	// answering (the connection is then dropped).
	Status int
	// Start is when the middleware received the request.
	Start time.Time
	// Duration is the time spent in the middleware, the handler included.
	Duration time.Duration
	// Handler is the time spent in the handler; 0 when it did not run.
	Handler time.Duration
	// Takeover is true when the handler ran after taking over a claim whose holder died.
	Takeover bool
	// Err is the error behind a store_error, fail_open or error outcome, or the error that
	// kept an executed response from being stored (idem.ErrLeaseLost or a store error: the
	// client still got the response).
	Err error
}
