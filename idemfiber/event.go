package idemfiber

import (
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// Outcome says what the middleware did with a request: idemhttp's outcomes, so that the
// same thing has the same word (and metric label) on both middlewares.
type Outcome = idemhttp.Outcome

// The outcomes of Event: idemhttp's (see idemhttp.Outcome for what each means).
const (
	OutcomeExecuted     = idemhttp.OutcomeExecuted
	OutcomeReleased     = idemhttp.OutcomeReleased
	OutcomeUncertain    = idemhttp.OutcomeUncertain
	OutcomeOversize     = idemhttp.OutcomeOversize
	OutcomeReplay       = idemhttp.OutcomeReplay
	OutcomeInFlight     = idemhttp.OutcomeInFlight
	OutcomeMismatch     = idemhttp.OutcomeMismatch
	OutcomeBypass       = idemhttp.OutcomeBypass
	OutcomeStoreError   = idemhttp.OutcomeStoreError
	OutcomeInvalidKey   = idemhttp.OutcomeInvalidKey
	OutcomeInvalidScope = idemhttp.OutcomeInvalidScope
	OutcomeMissingKey   = idemhttp.OutcomeMissingKey
	OutcomeError        = idemhttp.OutcomeError
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
