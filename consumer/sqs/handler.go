package sqs

import (
	"context"

	"github.com/idemkit/idem"
)

// Handler handles one message. It returns nil when the message is done with (its effect ran
// now, or it is a duplicate of an event already handled): the message is then deleted. Any
// error leaves the message for redelivery. An error matching idem.ErrInFlight (another consumer
// is handling the same event now) makes the Worker hide the message until the other holder's
// lease runs out (the *idem.InFlightError's RetryAfter) rather than for the whole visibility
// timeout.
type Handler func(ctx context.Context, m *Message) error

// errInvalid is the error option and argument checks wrap, so that callers match them with
// errors.Is(err, idem.ErrInvalidInput).
var errInvalid = idem.ErrInvalidInput
