package kafkaout_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/kafka"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/internal/e2e"
	"github.com/idemkit/idem/outbox/kafkaout"
)

// brokers are IDEM_KAFKA_BROKERS (comma-separated host:port) for an external Kafka, or else
// an in-process kfake cluster, as consumer/kafka's tests use.
var brokers []string

func TestMain(m *testing.M) {
	if v := os.Getenv("IDEM_KAFKA_BROKERS"); v != "" {
		brokers = strings.Split(v, ",")
		os.Exit(m.Run())
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		os.Exit(1)
	}
	brokers = c.ListenAddrs()
	code := m.Run()
	c.Close()
	os.Exit(code)
}

func topic(t *testing.T, partitions int32) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	name := fmt.Sprintf("outbox-%x", rand.Int64())
	if _, err := adm.CreateTopic(context.Background(), partitions, 1, nil, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopic(context.Background(), name) })
	return name
}

// TestEndToEnd: payments and their events committed together, relayed to a Kafka topic with
// every event published twice, consumed by an idem consumer (consumer/kafka) keyed on the
// Idempotency-Key header: each payment's effect runs once.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	name := topic(t, 3)
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	pub, err := kafkaout.New(prod)
	if err != nil {
		t.Fatal(err)
	}
	e2e.Run(t, pub, name, func(ctx context.Context, c *consumer.Consumer) error {
		w, err := kafka.NewWorker(c, kafka.Options{}, kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("g-"+name), kgo.ConsumeTopics(name),
			kgo.HeartbeatInterval(100*time.Millisecond), kgo.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			return err
		}
		return w.Run(ctx)
	})
}

// published publishes the events ms returns to a fresh topic of four partitions, reads them
// back, calls check on each record, and returns their values in the order read and how many
// partitions they were in.
func published(t *testing.T, ms func(topic string) []outbox.Message, check func(r *kgo.Record)) (values []string, partitions int) {
	t.Helper()
	name := topic(t, 4)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pub, _ := kafkaout.New(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := ms(name)
	for _, m := range events {
		if err := pub.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	in := map[int32]bool{}
	for len(values) < len(events) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			in[r.Partition] = true
			values = append(values, string(r.Value))
			check(r)
		})
	}
	return values, len(in)
}

// TestRecordOrderKey: events of distinct keys and one order key share the record key (the
// order key), so they land in one partition in the order they were published, each with its
// own Idempotency-Key header.
func TestRecordOrderKey(t *testing.T) {
	t.Parallel()
	got, partitions := published(t, func(topic string) (ms []outbox.Message) {
		for i := range 12 {
			ms = append(ms, outbox.Message{ID: int64(i), Key: fmt.Sprintf("order-1/step-%d", i), OrderKey: "order-1", Topic: topic, Body: fmt.Appendf(nil, "%d", i)})
		}
		return ms
	}, func(r *kgo.Record) {
		key, err := outbox.KeyOf(kafka.Message(r).Header)
		if err != nil || key != "order-1/step-"+string(r.Value) || string(r.Key) != "order-1" {
			t.Errorf("record %s: key %q, Idempotency-Key %q (%v); want record key order-1 and the event's own key", r.Value, r.Key, key, err)
		}
	})
	if fmt.Sprint(got) != "[0 1 2 3 4 5 6 7 8 9 10 11]" || partitions != 1 {
		t.Fatalf("received %v in %d partitions, want 0..11 in order in one", got, partitions)
	}
}

// TestRecord: the key is the record's key (one partition per key) and the Idempotency-Key
// header, the event's headers come along; a nil client is an option error.
func TestRecord(t *testing.T) {
	t.Parallel()
	got, partitions := published(t, func(topic string) (ms []outbox.Message) {
		for i := range 6 {
			ms = append(ms, outbox.Message{ID: int64(i), Key: "order-1/paid", Topic: topic, Body: fmt.Appendf(nil, "%d", i), Header: map[string][]string{"X-Trace": {"abc"}}})
		}
		return ms
	}, func(r *kgo.Record) {
		m := kafka.Message(r)
		if key, err := outbox.KeyOf(m.Header); err != nil || key != "order-1/paid" || string(r.Key) != key || fmt.Sprint(m.Header["X-Trace"]) != "[abc]" {
			t.Errorf("record key %q, header %v: %v", r.Key, m.Header, err)
		}
	})
	if fmt.Sprint(got) != "[0 1 2 3 4 5]" || partitions != 1 {
		t.Fatalf("received %v in %d partitions, want 0..5 in order in one", got, partitions)
	}
	var oe *idem.OptionError
	if _, err := kafkaout.New(nil); !errors.As(err, &oe) || oe.Field != "cl" {
		t.Errorf("nil client: %v", err)
	}
}

// TestNeverPublishableIsPermanent: a record Kafka can never take, to an illegal topic name or
// over the producer's record size, is a permanent error, not a failure the relay retries for
// ever as if the broker were down.
func TestNeverPublishableIsPermanent(t *testing.T) {
	t.Parallel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pub, _ := kafkaout.New(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	good := topic(t, 1)
	for name, m := range map[string]outbox.Message{
		"space":     {ID: 1, Key: "k", Topic: "orders paid"},
		"slash":     {ID: 2, Key: "k", Topic: "orders/paid"},
		"dot":       {ID: 3, Key: "k", Topic: "."},
		"too long":  {ID: 4, Key: "k", Topic: strings.Repeat("t", 250)},
		"too large": {ID: 5, Key: "k", Topic: good, Body: make([]byte, 128<<10)},
	} {
		if err := pub.Publish(ctx, m); !outbox.IsPermanent(err) {
			t.Errorf("%s: %v, want a permanent error", name, err)
		}
	}
	if err := pub.Publish(ctx, outbox.Message{ID: 6, Key: "k", Topic: good, Body: make([]byte, 32<<10)}); err != nil {
		t.Errorf("a record within the limits: %v", err)
	}
}
