package idemlambda

import (
	"errors"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// Outcome says what a wrapped handler (Wrap, WrapAPIGateway, WrapHTTPAPI) did with an
// invocation. Its values are short, stable, lowercase labels, fit for metrics, and mean what
// the same words mean in idemhttp.Outcome.
type Outcome string

// The outcomes of Event.
const (
	// OutcomeExecuted: the handler ran and its result is stored for replay.
	OutcomeExecuted Outcome = "executed"
	// OutcomeReleased: the handler ran and returned an error, or a response the runner's
	// Policy does not keep (5xx by default): the key is released and a retry runs it again.
	OutcomeReleased Outcome = "released"
	// OutcomeUncertain: the handler returned an error matching idem.ErrUncertain: the claim
	// is held as the engine's idem.UncertainPolicy says.
	OutcomeUncertain Outcome = "uncertain"
	// OutcomeReplay: the stored result was returned; the handler did not run.
	OutcomeReplay Outcome = "replay"
	// OutcomeInFlight: another invocation with the key is running (idem.ErrInFlight, or 409
	// from the API Gateway wrappers).
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeMismatch: the key was used with another event or request (idem.ErrMismatch, or
	// 422).
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeBypass: the handler ran without protection: the event has no key and RequireKey
	// is false, the request's method is not processed, or DisabledEnv is set.
	OutcomeBypass Outcome = "bypass"
	// OutcomeStoreError: the store failed before the handler ran (idem.ErrStoreUnavailable,
	// or 503): nothing was done.
	OutcomeStoreError Outcome = "store_error"
	// OutcomeMissingKey: the event has no key and RequireKey is set (ErrMissingKey, or 400).
	OutcomeMissingKey Outcome = "missing_key"
	// OutcomeInvalidKey: 400 from the API Gateway wrappers: the key is malformed or sent twice.
	OutcomeInvalidKey Outcome = "invalid_key"
	// OutcomeInvalidScope: 400 from the API Gateway wrappers: the caller could not be
	// identified.
	OutcomeInvalidScope Outcome = "invalid_scope"
	// OutcomeInvalidBody: 400 from the API Gateway wrappers: the body could not be decoded.
	OutcomeInvalidBody Outcome = "invalid_body"
	// OutcomeError: an unexpected error: an event that cannot be encoded, a stored result
	// that cannot be decoded, a caller that went away while it waited.
	OutcomeError Outcome = "error"
)

// Event describes one invocation of a wrapped handler, for metrics and logs. It is passed to
// Options.OnEvent or ProxyOptions.OnEvent by value, once per invocation, as the wrapped
// handler returns (an invocation whose handler panics reports nothing: the panic goes on).
type Event struct {
	// Outcome is what happened.
	Outcome Outcome
	// Key is the storage key (the scope and the key), "" when there is none.
	Key string
	// Status is the status answered by WrapAPIGateway and WrapHTTPAPI; 0 for Wrap.
	Status int
	// Start is when the wrapped handler was invoked.
	Start time.Time
	// Duration is the time spent in the wrapped handler, the handler included.
	Duration time.Duration
	// Takeover is true when the handler ran after taking over a claim whose holder died.
	Takeover bool
	// Err is the error behind a store_error or error outcome, the handler's error, or the
	// error that kept a result from being stored (idem.ErrLeaseLost or a store error: the
	// caller still got the result).
	Err error
}

// problemOutcome is the Outcome of a refusal with problem type typ.
func problemOutcome(typ string) Outcome {
	switch typ {
	case idemhttp.ProblemMissingKey:
		return OutcomeMissingKey
	case idemhttp.ProblemInvalidKey:
		return OutcomeInvalidKey
	case idemhttp.ProblemInvalidScope:
		return OutcomeInvalidScope
	case idemhttp.ProblemInvalidBody:
		return OutcomeInvalidBody
	case idemhttp.ProblemInFlight:
		return OutcomeInFlight
	case idemhttp.ProblemMismatch:
		return OutcomeMismatch
	case idemhttp.ProblemStoreUnavailable:
		return OutcomeStoreError
	}
	return OutcomeError
}

// ranOutcome is the Outcome of an invocation whose handler ran: herr is its error, kept
// whether the engine stored its result.
func ranOutcome(herr error, kept bool) Outcome {
	switch {
	case errors.Is(herr, idem.ErrUncertain):
		return OutcomeUncertain
	case herr != nil || !kept:
		return OutcomeReleased
	}
	return OutcomeExecuted
}
