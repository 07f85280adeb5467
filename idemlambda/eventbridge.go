package idemlambda

import (
	"context"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemkit/idem/consumer"
)

// EventBridgeMessage converts an EventBridge event into the message a consumer handles: its
// Body is the event's detail (the business fact), its ID the envelope's id (for logs only),
// its Subject the source and the detail type ("shop.orders/OrderPlaced"), and its Header the
// envelope's fields: "id", "source", "detail-type", "account", "region" and "time" (RFC 3339).
//
// The envelope belongs to the delivery, not to the fact. EventBridge gives an id to each event
// it accepts: a producer that retries a PutEvents call whose answer it lost puts the same fact
// again under a new id, a replay from an archive sends it again, and a rule's target that is
// retried after an error gets the same envelope again. So the key is taken from detail (see
// BodyKey), never from id or time.
func EventBridgeMessage(ev events.EventBridgeEvent) *consumer.Message {
	h := map[string][]string{
		"id":          {ev.ID},
		"source":      {ev.Source},
		"detail-type": {ev.DetailType},
		"account":     {ev.AccountID},
		"region":      {ev.Region},
	}
	if !ev.Time.IsZero() {
		h["time"] = []string{ev.Time.UTC().Format("2006-01-02T15:04:05Z07:00")}
	}
	return &consumer.Message{Body: []byte(ev.Detail), ID: ev.ID, Subject: ev.Source + "/" + ev.DetailType, Header: h}
}

// EventBridgeHandler returns a Lambda function handler for events from an EventBridge rule
// (pass it to lambda.Start). Each event is converted with EventBridgeMessage and handled by c,
// whose key function reads the business fact in detail (BodyKey("order_id") for a detail
// {"order_id": …}).
//
// EventBridge invokes its Lambda targets asynchronously, and Lambda retries an invocation that
// returns an error (twice by default, then the function's on-failure destination or
// dead-letter queue). So the handler returns nil when the event is done with (OutcomeExecuted or
// OutcomeReplay: the effect ran, now or before) and otherwise an error matching ErrNotDone and the
// Result's error: OutcomeInFlight (another invocation holds the key; the retry replays its result or
// takes over its expired claim), OutcomeFailed (the handler or the store failed) and OutcomeRejected (no key
// in detail, or the key reused for another detail: retries will not help, and the event ends
// in the on-failure destination, never silently dropped).
func EventBridgeHandler(c *consumer.Consumer) (func(ctx context.Context, ev events.EventBridgeEvent) error, error) {
	if c == nil {
		return nil, errNilConsumer("EventBridgeHandler")
	}
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		r := handleOne(ctx, c, EventBridgeMessage(ev))
		if r.Outcome.Ack() {
			return nil
		}
		return notDone("EventBridge event "+ev.ID, r)
	}, nil
}
