package idemgrpc

import (
	"time"

	"google.golang.org/grpc/codes"
)

// Outcome says what the server interceptor did with a call. Its values are short, stable,
// lowercase labels, fit for metrics, and mean what the same words mean in idemhttp.Outcome.
type Outcome string

// The outcomes of Event.
const (
	// OutcomeExecuted: the handler ran and its reply is stored for replay.
	OutcomeExecuted Outcome = "executed"
	// OutcomeReleased: the handler ran and the runner's Policy did not keep its reply (seen
	// through HTTPStatus: by default Unavailable, Internal, Aborted, …): the key is released
	// and a retry runs the handler again.
	OutcomeReleased Outcome = "released"
	// OutcomeUncertain: the handler ran and gave up (Canceled, DeadlineExceeded): it may have
	// acted, so the claim is held as the engine's idem.UncertainPolicy says.
	OutcomeUncertain Outcome = "uncertain"
	// OutcomeOversize: the handler ran and its reply was larger than
	// ServerOptions.MaxReplyBytes: the record is kept without it, so a retry gets
	// AlreadyExists (ReasonNotRetained) and never a second run.
	OutcomeOversize Outcome = "oversize"
	// OutcomeReplay: the stored reply (or ReasonNotRetained) was sent; the handler did not run.
	OutcomeReplay Outcome = "replay"
	// OutcomeInFlight: another call with the key is in progress: Aborted (ReasonInFlight).
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeMismatch: the key was used with another request: FailedPrecondition
	// (ReasonKeyReused).
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeBypass: the call went to the handler without protection: its method is not in
	// ServerOptions.Methods, or it has no key and ServerOptions.RequireKey is false.
	OutcomeBypass Outcome = "bypass"
	// OutcomeStoreError: the store failed before the handler ran: Unavailable
	// (ReasonStoreUnavailable), nothing was done.
	OutcomeStoreError Outcome = "store_error"
	// OutcomeInvalidKey: InvalidArgument (ReasonInvalidKey): the key is malformed or sent twice.
	OutcomeInvalidKey Outcome = "invalid_key"
	// OutcomeInvalidScope: InvalidArgument (ReasonInvalidScope): ServerOptions.Scope could not
	// name the caller.
	OutcomeInvalidScope Outcome = "invalid_scope"
	// OutcomeMissingKey: InvalidArgument (ReasonMissingKey).
	OutcomeMissingKey Outcome = "missing_key"
	// OutcomeError: an unexpected error (a request or reply that is not a protocol buffer
	// message, a stored reply that cannot be rebuilt), or the caller went away while its call
	// waited for the original.
	OutcomeError Outcome = "error"
)

// Event describes one call the server interceptor saw, for metrics and logs. It is passed to
// ServerOptions.OnEvent by value, once per call, before the interceptor returns.
type Event struct {
	// Outcome is what happened.
	Outcome Outcome
	// Method is the call's full method name ("/pkg.Service/Method").
	Method string
	// Key is the caller's key, "" when there is none or it is invalid.
	Key string
	// Code is the code the call is answered with (codes.OK for a reply).
	Code codes.Code
	// Start is when the interceptor received the call.
	Start time.Time
	// Duration is the time spent in the interceptor, the handler included.
	Duration time.Duration
	// Takeover is true when the handler ran after taking over a claim whose holder died.
	Takeover bool
	// Err is the error behind a store_error or error outcome, or the error that kept a reply
	// from being stored (idem.ErrLeaseLost or a store error: the caller still got the reply).
	Err error
}
