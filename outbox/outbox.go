package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// Message is one event in the outbox.
type Message struct {
	// ID orders the events of the table; the store assigns it.
	ID int64
	// Key is the event's idempotency key, taken from the business fact it announces (an
	// order's id and what happened to it: "order-42/paid"), never from a transport's id.
	// Publishers send it in the Idempotency-Key header. Two events with one key are one
	// fact (the consumer runs its effect once), so the key does not order distinct events:
	// OrderKey does. Required; at most idem.MaxStorageKeyLen bytes of UTF-8, without control
	// characters (a header carries it).
	Key string
	// OrderKey names the entity or stream whose events must arrive in order: "order-42" for
	// "order-42/created" then "order-42/paid". Events of one order key are published in the
	// order they were added: a later one is not handed to a relay while an earlier one is
	// unsent, and events of other order keys are not held up by it. Publishers map it to
	// the broker's own ordering (Kafka's record key, an SQS FIFO queue's message group).
	// Empty means Key, so that only repeats of one fact are ordered. The events a Store's
	// Claim hands out carry it filled in (Key when it was empty). At most
	// idem.MaxStorageKeyLen bytes.
	OrderKey string
	// Topic is where the event goes: a NATS subject, a RabbitMQ routing key, a queue or
	// topic name, as the Publisher reads it. Required.
	Topic string
	// Header holds headers to send with the event.
	Header map[string][]string
	// Body is the event's payload.
	Body []byte
	// CreatedAt is when the event was added (set by the store).
	CreatedAt time.Time
	// Attempts is how many times a relay has claimed the event, this claim included.
	Attempts int
}

// Check reports whether m can be added to an outbox: an error matching idem.ErrInvalidInput
// names the field that is wrong.
func (m Message) Check() error {
	switch {
	case m.Key == "":
		return fmt.Errorf("outbox: %w: Message.Key is empty: give the event the key of the fact it announces", idem.ErrInvalidInput)
	case len(m.Key) > idem.MaxStorageKeyLen:
		return fmt.Errorf("outbox: %w: Message.Key is %d bytes, over %d", idem.ErrInvalidInput, len(m.Key), idem.MaxStorageKeyLen)
	case !utf8.ValidString(m.Key):
		return fmt.Errorf("outbox: %w: Message.Key is not valid UTF-8", idem.ErrInvalidInput)
	case strings.IndexFunc(m.Key, isControl) >= 0:
		// The key travels in a header: a broker refuses a control character there (SQS) or
		// changes it (NATS sends a line break as a space), and the consumer would key on
		// another key than the outbox's.
		return fmt.Errorf("outbox: %w: Message.Key %.40q has a control character; a header cannot carry it", idem.ErrInvalidInput, m.Key)
	case len(m.OrderKey) > idem.MaxStorageKeyLen:
		return fmt.Errorf("outbox: %w: Message.OrderKey is %d bytes, over %d", idem.ErrInvalidInput, len(m.OrderKey), idem.MaxStorageKeyLen)
	case m.Topic == "":
		return fmt.Errorf("outbox: %w: Message.Topic is empty", idem.ErrInvalidInput)
	}
	return nil
}

// isControl reports whether r is an ASCII control character (or DEL).
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// Publisher sends an event to a broker. It returns nil only once the broker has accepted the
// event (a publish acknowledgement, a confirm); the relay marks the event sent then, and
// publishes it again after any error.
type Publisher interface {
	Publish(ctx context.Context, m Message) error
}

// PublisherFunc is a function that is a Publisher.
type PublisherFunc func(ctx context.Context, m Message) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, m Message) error { return f(ctx, m) }

// Store is an outbox table, as a relay sees it. Implementations: pgoutbox.Store,
// mysqloutbox.Store, sqliteoutbox.Store; outboxtest is the suite an implementation passes.
type Store interface {
	// Claim hands out at most limit events that are due at now and not claimed by another
	// relay, each the oldest unsent event of its order key (Message.OrderKey, or Key when
	// that is empty), and claims them until now+lease (adding one to their Attempts), oldest
	// first. The events carry their order key in OrderKey.
	Claim(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]Message, error)
	// Sent marks an event published: it is never claimed again, and Sweep deletes it once
	// the store's retention has passed.
	Sent(ctx context.Context, m Message) error
	// Retry makes an event claimed by m (same Attempts) due again at at, noting cause; a
	// relay whose claim was taken over meanwhile changes nothing.
	Retry(ctx context.Context, m Message, at time.Time, cause string) error
	// Lag is the age of the oldest unsent event by the database's clock, 0 when none.
	Lag(ctx context.Context) (time.Duration, error)
	// Sweep deletes at most batch events marked sent before now minus the store's retention,
	// and returns how many it deleted; callers loop until it returns fewer than batch. It is
	// store/sweeper's Sweepable: sweeper.Start(st, …) sweeps an outbox as it sweeps idem
	// records.
	Sweep(ctx context.Context, now time.Time, batch int) (int, error)
}

// Permanent marks a publish error that retrying cannot fix (a payload the broker refuses
// whatever happens). The relay still keeps the event, retrying at MaxBackoff, so that an
// operator can see and fix it; nothing is ever dropped.
func Permanent(err error) error { return &permanent{err} }

type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanent
	return errors.As(err, &p)
}

// KeyHeader is the header that carries an event's idempotency key: the one every face of
// idem reads.
const KeyHeader = idem.KeyHeader

// KeyOf returns the idempotency key an outbox event carries in header (as consumers receive
// it), or an error matching idem.ErrInvalidInput when there is none. A consumer's KeyFunc:
//
//	Key: func(m *consumer.Message) (string, error) { return outbox.KeyOf(m.Header) }
func KeyOf(header map[string][]string) (string, error) {
	for k, v := range header {
		if len(v) > 0 && v[0] != "" && strings.EqualFold(k, KeyHeader) {
			return v[0], nil
		}
	}
	return "", fmt.Errorf("outbox: %w: the message has no %s header", idem.ErrInvalidInput, KeyHeader)
}

// WithKey returns header with the Idempotency-Key header set to key, for publishers.
func WithKey(header map[string][]string, key string) map[string][]string {
	out := make(map[string][]string, len(header)+1)
	for k, v := range header {
		if !strings.EqualFold(k, KeyHeader) {
			out[k] = v
		}
	}
	out[KeyHeader] = []string{key}
	return out
}
