package amqp_test

import (
	"context"
	"errors"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/consumer/amqp"
	"github.com/idemkit/idem/internal/oteltest"
)

// TestTraceContinued: a message published with the producer's W3C traceparent in its AMQP
// headers is handled under the producer's trace: the consumer's span, the engine's claim,
// effect and completion, and the handler's span are its descendants; a duplicate published
// under another producer span replays in that span's trace.
func TestTraceContinued(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	if q == nil {
		return
	}
	tr := oteltest.New(t)
	c := tr.Consumer(t)
	conn, err := amqp091.Dial(q.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- amqp.Run(ctx, ch, q.name, c, amqp.Options{Concurrency: 2, Logger: quiet()}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	const body = "order:order-1:body-secret"
	for i, dup := range []bool{false, true} {
		producer, headers := tr.Produce()
		table := amqp091.Table{}
		for k, v := range headers {
			table[k] = v
		}
		q.mu.Lock()
		conf, err := q.pub.PublishWithDeferredConfirmWithContext(ctx, "", q.name, false, false,
			amqp091.Publishing{Body: []byte(body), Headers: table, MessageId: randHex(8)})
		q.mu.Unlock()
		if err == nil {
			var ok bool
			if ok, err = conf.WaitContext(ctx); err == nil && !ok {
				err = errors.New("nacked")
			}
		}
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		tr.Check(t, "body-secret", producer, dup)
	}
}
