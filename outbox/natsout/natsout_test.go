package natsout_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/natsjs"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/internal/e2e"
	"github.com/idemkit/idem/outbox/natsout"
)

// TestEndToEnd: payments and their events committed together, relayed to JetStream with
// every event published twice (outside the stream's duplicate window), consumed by an idem
// consumer: each payment's effect runs once.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	js, url, subject, cons := workStream(t, "OUTBOX")
	if url == "" {
		return
	}
	pub, err := natsout.New(js, "outbox-e2e")
	if err != nil {
		t.Fatal(err)
	}
	e2e.Run(t, pub, subject, func(ctx context.Context, c *consumer.Consumer) error {
		return natsjs.Run(ctx, cons, c, natsjs.Options{})
	})
}

// workStream connects to NATS (url is "" when there is none) and makes a stream of the
// test's own, removed at its end, with a "work" consumer. Its duplicate window is 100ms,
// shorter than the relays' backoff and lease, so that the repeats reach the consumer.
func workStream(t *testing.T, prefix string) (js jetstream.JetStream, url, subject string, cons jetstream.Consumer) {
	t.Helper()
	if js, url = connect(t); js == nil {
		return nil, "", "", nil
	}
	id := fmt.Sprintf("%x", rand.Int64())
	stream := prefix + "_" + id
	subject = strings.ToLower(prefix) + "." + id
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage, Duplicates: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "work", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return js, url, subject, cons
}

// connect returns a JetStream client of the test's server, closed when t ends, and the
// server's URL, or nil (t skipped or failed) when there is no server.
func connect(t *testing.T) (jetstream.JetStream, string) {
	t.Helper()
	url := testenv.NATSURL(t)
	if url == "" {
		return nil, ""
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, url
}

// TestDuplicateWindowDropsRepeat: within the stream's duplicate window, a second publish of
// one outbox event (same row) is dropped by JetStream itself.
func TestDuplicateWindowDropsRepeat(t *testing.T) {
	t.Parallel()
	js, _ := connect(t)
	if js == nil {
		return
	}
	id := fmt.Sprintf("%x", rand.Int64())
	ctx := context.Background()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OUTBOXD_" + id, Subjects: []string{"outboxd." + id}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(context.Background(), "OUTBOXD_"+id) }()
	pub, _ := natsout.New(js, "tbl")
	m := outboxMessage("outboxd."+id, 7)
	for range 2 {
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("%d messages in the stream after two publishes of one event, want 1", info.State.Msgs)
	}
}

// TestBadSubjectIsPermanent: a topic that is not a NATS subject can never be published; the
// relay is told so (a permanent error), rather than a failure it would take for the broker's.
func TestBadSubjectIsPermanent(t *testing.T) {
	t.Parallel()
	js, _ := connect(t)
	if js == nil {
		return
	}
	pub, _ := natsout.New(js, "tbl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, subject := range []string{"orders paid", "orders\tpaid", "orders..paid", ".orders", "orders.", "orders\x00"} {
		if err := pub.Publish(ctx, outboxMessage(subject, 1)); !outbox.IsPermanent(err) || !errors.Is(err, nats.ErrBadSubject) {
			t.Errorf("subject %q: %v, want a permanent ErrBadSubject", subject, err)
		}
	}
}

// TestKilledRelay: relay processes publish an event to JetStream and are killed (SIGKILL)
// before they mark it sent; after the lease another relay publishes it again, and the idem
// consumer, keyed by the event's Idempotency-Key header, runs each payment's effect once.
// The stream's duplicate window is shorter than the lease, as when a relay is down longer
// than the window: the repeat reaches the consumer.
func TestKilledRelay(t *testing.T) {
	if cfg, ok := e2e.ChildConfig(); ok {
		nc, err := nats.Connect(cfg.Broker)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		pub, _ := natsout.New(js, "payments")
		e2e.Child(cfg, pub)
	}
	t.Parallel()
	js, url, subject, cons := workStream(t, "OUTBOXK")
	if url == "" {
		return
	}
	pub, err := natsout.New(js, "payments")
	if err != nil {
		t.Fatal(err)
	}
	e2e.RunKilled(t, e2e.Killed{Pub: pub, Broker: url, Topic: subject, Test: "TestKilledRelay",
		Consume: func(ctx context.Context, c *consumer.Consumer) error {
			return natsjs.Run(ctx, cons, c, natsjs.Options{})
		}})
}
