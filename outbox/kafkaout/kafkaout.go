// Package kafkaout publishes outbox events to Apache Kafka (franz-go): the event's Topic is
// the Kafka topic, its order key (outbox.Message.OrderKey, or its key when unset) is the
// record's key, so an order key's events land in one partition in the order they were
// published, and its idempotency key travels in the Idempotency-Key header, which
// consumer/kafka hands the consumer, so that outbox.KeyOf keys the effect.
package kafkaout

import (
	"cmp"
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

// Publisher is an outbox.Publisher for Kafka. Create it with New.
type Publisher struct{ cl *kgo.Client }

// New returns a publisher through cl. The client's producer settings stand: its default,
// acks from all in-sync replicas with idempotent writes, is what an outbox wants.
func New(cl *kgo.Client) (*Publisher, error) {
	if cl == nil {
		return nil, &idem.OptionError{Package: "kafkaout", Field: "cl", Problem: "is nil"}
	}
	return &Publisher{cl: cl}, nil
}

// Publish produces m, keyed by its order key, and waits for the broker's acknowledgement.
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	rec := &kgo.Record{Topic: m.Topic, Key: []byte(cmp.Or(m.OrderKey, m.Key)), Value: m.Body}
	for k, vs := range outbox.WithKey(m.Header, m.Key) {
		for _, v := range vs {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	if err := p.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("kafkaout: %w", err)
	}
	return nil
}
