package amqpout_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/amqp"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/amqpout"
	"github.com/idemkit/idem/outbox/internal/e2e"
)

func dial(t *testing.T) *amqp091.Connection {
	t.Helper()
	url := testenv.AMQPURL(t)
	if url == "" {
		t.SkipNow() // testenv has said why (and failed under IDEM_REQUIRE_SERVICES)
	}
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func channel(t *testing.T, conn *amqp091.Connection) *amqp091.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// workQueue connects to RabbitMQ and declares a queue of the test's own (deleted with its
// connection), with a confirming publisher.
func workQueue(t *testing.T, prefix string) (*amqp091.Connection, string, *amqpout.Publisher) {
	t.Helper()
	conn := dial(t)
	queue := fmt.Sprintf("%s-%x", prefix, rand.Int64())
	if _, err := channel(t, conn).QueueDeclare(queue, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	pub, err := amqpout.New(channel(t, conn), "")
	if err != nil {
		t.Fatal(err)
	}
	return conn, queue, pub
}

// TestEndToEnd: payments and their events committed together, relayed to RabbitMQ with
// confirms and every event published twice, consumed by an idem consumer: each payment's
// effect runs once.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	conn, queue, pub := workQueue(t, "outbox-e2e")
	e2e.Run(t, pub, queue, func(ctx context.Context, c *consumer.Consumer) error {
		return amqp.Run(ctx, channel(t, conn), queue, c, amqp.Options{})
	})
}

// TestUnroutableIsAnError: an event no queue takes is not reported published (the relay
// keeps it), although the broker confirms it.
func TestUnroutableIsAnError(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	pub, err := amqpout.New(channel(t, conn), "")
	if err != nil {
		t.Fatal(err)
	}
	err = pub.Publish(context.Background(), outbox.Message{ID: 1, Key: "k", Topic: fmt.Sprintf("no-such-queue-%x", rand.Int64()), Body: []byte("b")})
	if err == nil || !strings.Contains(err.Error(), "unroutable") {
		t.Fatalf("publish to no queue: %v, want an unroutable error", err)
	}
}

// TestMultiValuedHeader: a header with several values arrives with all of them, joined with
// commas, never only the first.
func TestMultiValuedHeader(t *testing.T) {
	t.Parallel()
	conn, queue, pub := workQueue(t, "outbox-multi")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pub.Publish(ctx, outbox.Message{ID: 7, Key: "k", Topic: queue, Body: []byte("b"),
		Header: map[string][]string{"X-Tags": {"a", "b", "c"}}}); err != nil {
		t.Fatal(err)
	}
	m := amqp.Message(get(ctx, t, channel(t, conn), queue))
	if got := m.Header["X-Tags"]; !slices.Equal(got, []string{"a,b,c"}) {
		t.Fatalf("X-Tags arrived as %q, want [\"a,b,c\"]", got)
	}
}

// get waits for a message of queue and takes it.
func get(ctx context.Context, t *testing.T, ch *amqp091.Channel, queue string) amqp091.Delivery {
	t.Helper()
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return d
		}
		if ctx.Err() != nil {
			t.Fatal("the event never arrived")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLongKeyIsPublished: an event key may be up to idem.MaxStorageKeyLen bytes, and AMQP's
// message-id takes at most 255: the event is published with its whole key in the
// Idempotency-Key header and its row id as the message-id. A topic or a header name too long
// for AMQP is a permanent error, never a publish that fails for ever as if the broker were down.
func TestLongKeyIsPublished(t *testing.T) {
	t.Parallel()
	conn, queue, pub := workQueue(t, "outbox-longkey")
	key := strings.Repeat("k", idem.MaxStorageKeyLen)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pub.Publish(ctx, outbox.Message{ID: 42, Key: key, Topic: queue, Body: []byte("b")}); err != nil {
		t.Fatalf("publish of a %d-byte key: %v", len(key), err)
	}
	m := amqp.Message(get(ctx, t, channel(t, conn), queue))
	if got, err := outbox.KeyOf(m.Header); err != nil || got != key {
		t.Fatalf("key header: %d bytes, %v; want the %d-byte key", len(got), err, len(key))
	}
	if m.ID != "42" {
		t.Fatalf("message-id %q, want the row id 42", m.ID)
	}

	for name, m := range map[string]outbox.Message{
		"topic":  {ID: 1, Key: "k", Topic: strings.Repeat("t", 256)},
		"header": {ID: 2, Key: "k", Topic: queue, Header: map[string][]string{strings.Repeat("h", 256): {"v"}}},
	} {
		err := pub.Publish(ctx, m)
		if err == nil || !outbox.IsPermanent(err) {
			t.Errorf("%s of 256 bytes: %v, want a permanent error", name, err)
		}
	}
}

// TestKilledRelay: relay processes publish an event to RabbitMQ (confirmed) and are killed
// (SIGKILL) before they mark it sent; after the lease another relay publishes it again, and
// the idem consumer, keyed by the event's Idempotency-Key header, runs each payment's effect
// once.
func TestKilledRelay(t *testing.T) {
	if cfg, ok := e2e.ChildConfig(); ok {
		conn, err := amqp091.Dial(cfg.Broker)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		pub, err := amqpout.New(ch, "")
		if err != nil {
			t.Fatal(err)
		}
		e2e.Child(cfg, pub)
	}
	t.Parallel()
	conn, queue, pub := workQueue(t, "outbox-kill")
	e2e.RunKilled(t, e2e.Killed{Pub: pub, Broker: testenv.AMQPURL(t), Topic: queue, Test: "TestKilledRelay",
		Consume: func(ctx context.Context, c *consumer.Consumer) error {
			return amqp.Run(ctx, channel(t, conn), queue, c, amqp.Options{})
		}})
}
