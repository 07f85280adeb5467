// Package kafkaout publishes outbox events to Apache Kafka (franz-go): the event's Topic is
// the Kafka topic, its order key (outbox.Message.OrderKey, or its key when unset) is the
// record's key, so an order key's events land in one partition in the order they were
// published, and its idempotency key travels in the Idempotency-Key header, which
// consumer/kafka hands the consumer, so that outbox.KeyOf keys the effect.
package kafkaout

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
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

// Publish produces m, keyed by its order key, and waits for the broker's acknowledgement. A
// record Kafka can never take, to a topic whose name is not a legal Kafka topic name (1 to 249
// letters, digits, '.', '_' and '-'; not "." or "..") or larger than the client's or the
// broker's limit, is a permanent error (outbox.Permanent).
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	if !legalTopic(m.Topic) {
		return outbox.Permanent(fmt.Errorf("kafkaout: event %d: %q is not a legal Kafka topic name: %w", m.ID, m.Topic, kerr.InvalidTopicException))
	}
	rec := &kgo.Record{Topic: m.Topic, Key: []byte(cmp.Or(m.OrderKey, m.Key)), Value: m.Body}
	for k, vs := range outbox.WithKey(m.Header, m.Key) {
		for _, v := range vs {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	if err := p.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) || errors.Is(err, kerr.InvalidTopicException) {
			return outbox.Permanent(fmt.Errorf("kafkaout: event %d: %w", m.ID, err))
		}
		return fmt.Errorf("kafkaout: %w", err)
	}
	return nil
}

// legalTopic reports whether Kafka takes name as a topic name.
func legalTopic(name string) bool {
	if name == "" || len(name) > 249 || name == "." || name == ".." {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
