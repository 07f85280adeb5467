package consumer

import (
	"errors"
	"strconv"
	"time"
)

// Outcome is what became of one delivery, and so what the adapter does with it.
type Outcome uint8

const (
	// Processed: the effect ran now and its record is completed. Ack (delete) the message.
	Processed Outcome = iota + 1
	// Duplicate: the effect had already run for this key (here or in another consumer); it
	// was skipped and the stored result returned. Ack (delete) the message.
	Duplicate
	// InFlight: another holder is running the effect for this key now. Do not ack; let the
	// broker redeliver after Result.RetryAfter (JetStream NakWithDelay, SQS visibility
	// change), by when the holder has finished (the redelivery is a Duplicate) or died (its
	// lease has run out and the redelivery takes over).
	InFlight
	// Failed: the handler failed, or the store could not be reached and nothing ran (fail
	// closed). The claim was released (or held, for an uncertain outcome). Do not ack; let the
	// broker redeliver (after Result.RetryAfter when it can delay).
	Failed
	// Rejected: the message can never be handled: its key could not be derived, its key was
	// used before for a different event (idem.ErrMismatch), or the handler rejected it with
	// Reject. Dead-letter it (JetStream Term, AMQP reject without requeue, SQS: leave it for
	// the queue's redrive policy).
	Rejected
)

// String returns "processed", "duplicate", "in_flight", "failed", "rejected" or "unknown(N)".
func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	case InFlight:
		return "in_flight"
	case Failed:
		return "failed"
	case Rejected:
		return "rejected"
	}
	return "unknown(" + strconv.Itoa(int(o)) + ")"
}

// Ack reports whether the delivery is done with and must be acked (deleted): true for
// Processed and Duplicate.
func (o Outcome) Ack() bool { return o == Processed || o == Duplicate }

// Result is the outcome of Consumer.Handle.
type Result struct {
	// Outcome says what happened and what to do with the delivery.
	Outcome Outcome
	// Key is the scoped idempotency key; empty when the key could not be derived.
	Key string
	// Output is the handler's result: the one it returned now (Processed) or the stored one
	// (Duplicate). Nil otherwise. Treat it as read-only.
	Output []byte
	// OutputOmitted reports that the result was larger than Options.MaxResult and was not
	// stored: a Duplicate then has no Output.
	OutputOmitted bool
	// Takeover reports that this delivery took over the claim of a holder whose lease had run
	// out (it had crashed or stalled): the effect may have run partly before.
	Takeover bool
	// RetryAfter is, for InFlight, how long until the message should come back (the holder's
	// remaining lease, at most Options.InFlightDelay); for Failed, Options.RetryDelay.
	RetryAfter time.Duration
	// Err is why the message was not processed (InFlight, Failed, Rejected: it matches
	// idem.ErrInFlight, idem.ErrStoreUnavailable, idem.ErrUncertain, idem.ErrMismatch,
	// ErrRejected or the handler's error). With Processed it is set when the effect ran but its
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
// Result is Rejected, so that the adapter dead-letters the message instead of redelivering it.
func Reject(err error) error { return &rejected{err: err} }
