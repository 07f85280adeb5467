package natsjs_test

import (
	"context"
	"net/textproto"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/idemkit/idem/consumer/natsjs"
	"github.com/idemkit/idem/internal/oteltest"
)

// TestTraceContinued: a message published with the producer's W3C traceparent in its NATS
// headers is handled under the producer's trace: the consumer's span, the engine's claim,
// effect and completion, and the handler's span are its descendants; a duplicate published
// under another producer span replays in that span's trace.
func TestTraceContinued(t *testing.T) {
	t.Parallel()
	q, cons := setup(t, 5*time.Second)
	tr := oteltest.New(t)
	c := tr.Consumer(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- natsjs.Run(ctx, cons, c, natsjs.Options{Concurrency: 2, Logger: quiet()}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	const body = "order:order-1:body-secret"
	for i, dup := range []bool{false, true} {
		producer, headers := tr.Produce()
		msg := &nats.Msg{Subject: q.subject, Data: []byte(body), Header: nats.Header{}}
		for k, v := range headers {
			// As a producer that writes canonical header names (net/http's) would:
			// Traceparent. NATS headers keep the case they are sent with.
			msg.Header.Set(textproto.CanonicalMIMEHeaderKey(k), v)
		}
		if _, err := q.js.PublishMsg(ctx, msg); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		tr.Check(t, "body-secret", producer, dup)
	}
}
