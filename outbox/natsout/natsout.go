// Package natsout publishes outbox events to NATS JetStream: the event's Topic is the
// subject, its key travels in the Idempotency-Key header, and the Nats-Msg-Id header names the
// outbox row, so that JetStream's duplicate window drops a relay's second publish of one event
// and the consumer's idempotency record covers what falls outside it. A stream keeps the order
// the relay publishes in, which is the order of each order key's events
// (outbox.Message.OrderKey); the order key itself is not sent.
package natsout

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

// Publisher is an outbox.Publisher for JetStream. Create it with New.
type Publisher struct {
	js     jetstream.JetStream
	prefix string
}

// New returns a publisher through js. idPrefix starts every Nats-Msg-Id (the outbox table's
// name, say), so that events of two outbox tables publishing to one stream never share one.
func New(js jetstream.JetStream, idPrefix string) (*Publisher, error) {
	if js == nil {
		return nil, &idem.OptionError{Package: "natsout", Field: "js", Problem: "is nil"}
	}
	return &Publisher{js: js, prefix: idPrefix}, nil
}

// Publish sends m and waits for the stream's acknowledgement. A Topic that is not a valid
// subject (empty, with whitespace or NUL, or an empty token) can never be published: Publish
// returns a permanent error (outbox.Permanent) for it.
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	if badSubject(m.Topic) {
		return outbox.Permanent(fmt.Errorf("natsout: event %d: topic %q is not a NATS subject: %w", m.ID, m.Topic, nats.ErrBadSubject))
	}
	msg := &nats.Msg{Subject: m.Topic, Data: m.Body, Header: nats.Header(outbox.WithKey(m.Header, m.Key))}
	_, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(p.prefix+":"+strconv.FormatInt(m.ID, 10)))
	return err
}

// badSubject reports whether a publish to subject can never succeed: empty, with whitespace
// or NUL, or with an empty token ("a..b", ".a", "a.").
func badSubject(subject string) bool {
	if subject == "" || strings.IndexFunc(subject, func(r rune) bool { return r == 0 || unicode.IsSpace(r) }) >= 0 {
		return true
	}
	return slices.Contains(strings.Split(subject, "."), "")
}
