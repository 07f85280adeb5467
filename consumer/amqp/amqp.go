package amqp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
)

// Options configure Run. The zero value is a good default for every field.
type Options struct {
	// Concurrency is how many deliveries Run handles at once; it is also the channel's
	// prefetch count (basic.qos), so the broker hands this consumer no more unacked messages
	// than it can work on. Default 10.
	Concurrency int
	// ConsumerTag names the consumer on the broker. Default "": the library makes a unique one.
	ConsumerTag string
	// Logger receives ack and channel errors. Default slog.Default().
	Logger *slog.Logger

	// beforeAck, set by tests, is called before a delivery is acked; true skips the ack, as if
	// the process died at that instant.
	beforeAck func(consumer.Result) bool
}

// Message returns the consumer.Message for an AMQP delivery: its body, its string-valued
// headers, its routing key as Subject, its message-id (or, when the publisher set none, its
// delivery tag) as ID, and the broker's redelivered flag. AMQP has no broker-side lease to
// extend: an unacked delivery stays with its consumer until it is acked or its channel closes.
func Message(d amqp091.Delivery) *consumer.Message {
	m := &consumer.Message{Body: d.Body, Subject: d.RoutingKey, ID: d.MessageId, Redelivered: d.Redelivered}
	if m.ID == "" {
		m.ID = "tag:" + strconv.FormatUint(d.DeliveryTag, 10)
	}
	for k, v := range d.Headers {
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		case int, int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool, float32, float64:
			s = fmt.Sprint(v)
		default:
			continue
		}
		if m.Header == nil {
			m.Header = make(map[string][]string, len(d.Headers))
		}
		m.Header[k] = []string{s}
	}
	return m
}

// Settle tells the broker what became of d, as r says: Ack for OutcomeExecuted and OutcomeReplay;
// for OutcomeInFlight and OutcomeFailed, Nack with requeue after waiting r.RetryAfter (AMQP cannot delay a
// requeue; the wait is cut short when ctx is done), so the message comes back to this or another
// consumer; for OutcomeRejected, Nack without requeue, which dead-letters it when the queue has a
// dead-letter exchange (x-dead-letter-exchange) and drops it otherwise.
func Settle(ctx context.Context, d amqp091.Delivery, r consumer.Result) error {
	switch r.Outcome {
	case consumer.OutcomeExecuted, consumer.OutcomeReplay:
		return d.Ack(false)
	case consumer.OutcomeRejected:
		return d.Nack(false, false)
	}
	if r.RetryAfter > 0 {
		t := time.NewTimer(r.RetryAfter)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return d.Nack(false, true)
}

// ErrClosed is returned by Run when the channel or its connection closed under it.
var ErrClosed = errors.New("amqp: channel closed")

// Run consumes queue on ch with manual acks and opt.Concurrency handlers until ctx is done,
// handling each delivery with c and settling it (see Settle). Then it stops gracefully: it
// cancels the consumer so the broker sends no more, lets the handlers under way finish (their
// contexts are detached from ctx, so an effect is not cut short) and settles their deliveries,
// and returns nil. Deliveries the broker had sent but no handler had started stay unacked and
// are requeued when the channel closes. ch stays the caller's: Run does not close it (but it
// sets its prefetch count). Run returns ErrClosed if the channel closes under it, and an error
// matching idem.ErrInvalidInput when an argument is invalid.
func Run(ctx context.Context, ch *amqp091.Channel, queue string, c *consumer.Consumer, opt Options) error {
	switch {
	case ch == nil:
		return &idem.OptionError{Package: "amqp", Field: "channel", Problem: "is nil"}
	case c == nil:
		return &idem.OptionError{Package: "amqp", Field: "consumer", Problem: "is nil"}
	case opt.Concurrency < 0:
		return &idem.OptionError{Package: "amqp", Field: "Options.Concurrency", Problem: fmt.Sprintf("%d is negative", opt.Concurrency)}
	}
	opt.Concurrency = cmp.Or(opt.Concurrency, 10)
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if err := ch.Qos(opt.Concurrency, 0, false); err != nil {
		return fmt.Errorf("amqp: qos: %w", err)
	}
	// The consumer is cancelled (basic.cancel) when ctx is done; deliveries then closes.
	deliveries, err := ch.ConsumeWithContext(ctx, queue, opt.ConsumerTag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("amqp: consume %q: %w", queue, err)
	}
	hctx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for range opt.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range deliveries {
				handle(ctx, hctx, c, opt, d)
			}
		}()
	}
	wg.Wait()
	if ctx.Err() == nil {
		return ErrClosed
	}
	return nil
}

// handle runs one delivery on hctx; ctx only cuts a redelivery wait short.
func handle(ctx, hctx context.Context, c *consumer.Consumer, opt Options, d amqp091.Delivery) {
	r := c.Handle(hctx, Message(d))
	if r.Outcome.Ack() && opt.beforeAck != nil && opt.beforeAck(r) {
		return
	}
	if err := Settle(ctx, d, r); err != nil {
		opt.Logger.Warn("amqp: could not settle delivery; the broker requeues it when the channel closes",
			"queue", d.RoutingKey, "outcome", r.Outcome.String(), "err", err)
	}
}
