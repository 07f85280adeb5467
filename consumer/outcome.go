package consumer

import (
	"errors"
	"time"
)

// Outcome is what became of one delivery, and so what the adapter does with it: a short,
// stable, lowercase label, fit for metrics, as idem.Outcome and idemhttp.Outcome are; a word
// that also names an outcome of the HTTP faces or of the engine means the same there.
type Outcome string

const (
	// OutcomeExecuted: the effect ran now and its record is completed. Ack (delete) the
	// message.
	OutcomeExecuted Outcome = "executed"
	// OutcomeReplay: the effect had already run for this key (here or in another consumer);
	// it was skipped and the stored result returned. Ack (delete) the message.
	OutcomeReplay Outcome = "replay"
	// OutcomeInFlight: another holder is running the effect for this key now. Do not ack;
	// let the broker redeliver after Result.RetryAfter (JetStream NakWithDelay, SQS
	// visibility change), by when the holder has finished (the redelivery is a replay) or died
	// (its lease has run out and the redelivery takes over).
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeFailed: the handler failed, or the store could not be reached and nothing ran
	// (fail closed). The claim was released (or held, for an uncertain outcome). Do not ack;
	// let the broker redeliver (after Result.RetryAfter when it can delay).
	OutcomeFailed Outcome = "failed"
	// OutcomeRejected: the message can never be handled: its key could not be derived, its
	// key was used before for a different event (idem.ErrMismatch), or the handler rejected
	// it with Reject. Dead-letter it (JetStream Term, AMQP reject without requeue, SQS: leave
	// it for the queue's redrive policy).
	OutcomeRejected Outcome = "rejected"
)

// String returns the label: "executed", "replay", "in_flight", "failed" or "rejected".
func (o Outcome) String() string { return string(o) }

// Ack reports whether the delivery is done with and must be acked (deleted): true for
// OutcomeExecuted and OutcomeReplay.
func (o Outcome) Ack() bool { return o == OutcomeExecuted || o == OutcomeReplay }

// Event describes one message Handle handled, for metrics, logs and tracing: it is passed to
// Options.OnEvent (and to the func Options.Trace returned) as Handle returns.
type Event struct {
	// Message is the message (nil if Handle was given none); it must not be kept after the
	// callback returns.
	Message *Message
	// Result is what Handle returns, Outcome included.
	Result
	// Duration is the time spent in Handle, the handler included.
	Duration time.Duration
}

// Result is the outcome of Consumer.Handle.
type Result struct {
	// Outcome says what happened and what to do with the delivery.
	Outcome Outcome
	// Key is the scoped idempotency key; empty when the key could not be derived.
	Key string
	// Output is the handler's result: the one it returned now (OutcomeExecuted) or the stored
	// one (OutcomeReplay). Nil otherwise. Treat it as read-only.
	Output []byte
	// OutputOmitted reports that the result was larger than Options.MaxResult and was not
	// stored: an OutcomeReplay then has no Output.
	OutputOmitted bool
	// Takeover reports that this delivery took over the claim of a holder whose lease had run
	// out (it had crashed or stalled): the effect may have run partly before.
	Takeover bool
	// RetryAfter is, for OutcomeInFlight, how long until the message should come back (the
	// holder's remaining lease, at most Options.InFlightDelay); for OutcomeFailed,
	// Options.RetryDelay.
	RetryAfter time.Duration
	// Err is why the message was not processed (OutcomeInFlight, OutcomeFailed,
	// OutcomeRejected: it matches idem.ErrInFlight, idem.ErrStoreUnavailable,
	// idem.ErrUncertain, idem.ErrMismatch, ErrRejected or the handler's error). With
	// OutcomeExecuted it is set when the effect ran but its
	// record could not be stored (idem.ErrStoreUnavailable or idem.ErrLeaseLost): the
	// message is acked anyway, as redelivering it could only run the effect twice.
	Err error
}

// ErrRejected marks a message that can never be handled. Handlers return Reject(err) for a
// permanent failure; Results for rejected messages match it with errors.Is when the handler
// rejected them.
var ErrRejected = errors.New("consumer: message rejected")

type rejected struct{ err error }

func (e *rejected) Error() string {
	if e.err == nil {
		return ErrRejected.Error()
	}
	return "consumer: message rejected: " + e.err.Error()
}

func (e *rejected) Unwrap() []error {
	if e.err == nil {
		return []error{ErrRejected}
	}
	return []error{ErrRejected, e.err}
}

// Reject marks err as a permanent failure of the message: retrying it can never succeed (it
// is malformed, or refers to something that does not exist). The claim is released and the
// Result is OutcomeRejected, so that the adapter dead-letters the message instead of redelivering it.
func Reject(err error) error { return &rejected{err: err} }
