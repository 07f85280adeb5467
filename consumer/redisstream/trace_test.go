package redisstream_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/consumer/redisstream"
	"github.com/idemkit/idem/internal/oteltest"
)

// TestTraceContinued: an entry added with the producer's W3C traceparent as one of its fields
// is handled under the producer's trace: the consumer's span, the engine's claim, effect and
// completion, and the handler's span are its descendants; a duplicate added under another
// producer span replays in that span's trace.
func TestTraceContinued(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	if q == nil {
		return
	}
	tr := oteltest.New(t)
	w, err := redisstream.NewWorker(q.rdb, tr.Consumer(t), q.options())
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
		values := []any{"body", body}
		for k, v := range headers {
			values = append(values, k, v)
		}
		if err := q.rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.stream, Values: values}).Err(); err != nil {
			t.Fatalf("add %d: %v", i, err)
		}
		tr.Check(t, "body-secret", producer, dup)
	}
}
