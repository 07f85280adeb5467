package kafka_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/consumer/kafka"
	"github.com/idemkit/idem/internal/oteltest"
)

// TestTraceContinued: a record produced with the producer's W3C traceparent in its headers is
// handled under the producer's trace: the consumer's span, the engine's claim, effect and
// completion, and the handler's span are its descendants; a duplicate produced under another
// producer span replays in that span's trace.
func TestTraceContinued(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 1)
	tr := oteltest.New(t)
	w, err := kafka.NewWorker(tr.Consumer(t), kafka.Options{Logger: quiet()}, q.clientOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	const body = "order:order-1:body-secret"
	for i, dup := range []bool{false, true} {
		producer, headers := tr.Produce()
		rec := &kgo.Record{Topic: q.topic, Value: []byte(body)}
		for k, v := range headers {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		if err := q.prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		tr.Check(t, "body-secret", producer, dup)
	}
}
