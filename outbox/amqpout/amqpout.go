// Package amqpout publishes outbox events to RabbitMQ with publisher confirms: the event's
// Topic is the routing key on the configured exchange, its key travels in the
// Idempotency-Key header, the AMQP message-id is the outbox row's id (for logs: the consumer
// keys on the header, never on the message-id), and Publish returns only once the broker has
// confirmed the message.
// A queue keeps the order the relay publishes in, which is the order of each order key's
// events (outbox.Message.OrderKey); the order key itself is not sent.
package amqpout

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

// maxShortString is the longest AMQP short string: routing keys, header names, message ids.
const maxShortString = 255

// Publisher is an outbox.Publisher for RabbitMQ. Create it with New.
type Publisher struct {
	mu       sync.Mutex // one publish and its confirm at a time on the channel
	ch       *amqp091.Channel
	exchange string
	returns  chan amqp091.Return
}

// New puts ch in confirm mode and returns a publisher to exchange ("" is the default
// exchange, where the routing key is the queue's name).
func New(ch *amqp091.Channel, exchange string) (*Publisher, error) {
	if ch == nil {
		return nil, &idem.OptionError{Package: "amqpout", Field: "ch", Problem: "is nil"}
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("amqpout: confirm mode: %w", err)
	}
	// Messages are mandatory: one no queue takes is returned (before its confirm), and
	// Publish fails, so the relay keeps the event instead of losing it.
	returns := ch.NotifyReturn(make(chan amqp091.Return, 16))
	return &Publisher{ch: ch, exchange: exchange, returns: returns}, nil
}

// Publish sends m as a persistent message and waits for the broker's confirm; a nack or a
// returned context error means it may or may not have arrived, and the relay sends it again.
//
// AMQP carries the routing key and header names as short strings of at most 255 bytes: an
// event whose Topic or a header name is longer can never be published, and Publish returns a
// permanent error (outbox.Permanent) naming it. The key travels as a header value, which has
// no such limit. A header with several values is sent as one, its values joined with commas
// (as sqsout sends it, and as HTTP lists them).
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	if len(m.Topic) > maxShortString {
		return outbox.Permanent(fmt.Errorf("amqpout: event %d: topic is %d bytes; an AMQP routing key takes at most %d", m.ID, len(m.Topic), maxShortString))
	}
	h := amqp091.Table{}
	for k, v := range outbox.WithKey(m.Header, m.Key) {
		if len(k) > maxShortString {
			return outbox.Permanent(fmt.Errorf("amqpout: event %d: header name %.32q… is %d bytes; an AMQP header name takes at most %d", m.ID, k, len(k), maxShortString))
		}
		if len(v) > 0 {
			h[k] = strings.Join(v, ",")
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	conf, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, m.Topic, true, false, amqp091.Publishing{
		Headers: h, Body: m.Body, DeliveryMode: amqp091.Persistent, MessageId: strconv.FormatInt(m.ID, 10),
	})
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("amqpout: broker nacked event %d", m.ID)
	}
	select {
	case r := <-p.returns:
		return fmt.Errorf("amqpout: event %d returned unroutable (%d %s): no queue is bound to %q on %q", m.ID, r.ReplyCode, r.ReplyText, m.Topic, p.exchange)
	default:
		return nil
	}
}
