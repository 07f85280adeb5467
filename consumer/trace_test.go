package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
)

type traceKey struct{}

// stageSeer records, for each engine stage, the trace value it found in its context.
type stageSeer struct {
	mu   sync.Mutex
	seen map[idem.Stage][]any
}

func (s *stageSeer) Begin(ctx context.Context, stage idem.Stage, _ string) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[stage] = append(s.seen[stage], ctx.Value(traceKey{}))
	return ctx
}

func (s *stageSeer) End(context.Context, idem.Event) {}

// TestTrace: the engine's stages and the handler run under the context Options.Trace returns
// for the message, and its func gets every Result, a panic's included.
func TestTrace(t *testing.T) {
	t.Parallel()
	seer := &stageSeer{seen: map[idem.Stage][]any{}}
	b := setup(t, idem.Options{Observer: seer, Logger: discard()})
	var (
		mu      sync.Mutex
		results []consumer.Result
	)
	trace := func(ctx context.Context, m *consumer.Message) (context.Context, func(consumer.Result)) {
		ctx = context.WithValue(ctx, traceKey{}, m.Header["traceparent"][0])
		return ctx, func(r consumer.Result) {
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}
	}
	var handlerSaw []any
	h := func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		handlerSaw = append(handlerSaw, ctx.Value(traceKey{}))
		if string(m.Body) == "order:9:panic" {
			panic("boom")
		}
		return b.charge(ctx, m)
	}
	c := newConsumer(t, b.engine, h, consumer.Options{Trace: trace})
	msg := func(body, tp string) *consumer.Message {
		return &consumer.Message{Body: []byte(body), Header: map[string][]string{"traceparent": {tp}}}
	}
	ctx := context.Background()
	if r := c.Handle(ctx, msg("order:1:a", "tp-1")); r.Outcome != consumer.Processed {
		t.Fatalf("first: %+v", r)
	}
	if r := c.Handle(ctx, msg("order:1:a", "tp-2")); r.Outcome != consumer.Duplicate {
		t.Fatalf("duplicate: %+v", r)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the handler's panic did not go on")
			}
		}()
		c.Handle(ctx, msg("order:9:panic", "tp-3"))
	}()

	if want := []any{"tp-1", "tp-3"}; len(handlerSaw) != 2 || handlerSaw[0] != want[0] || handlerSaw[1] != want[1] {
		t.Errorf("handler saw %v, want %v", handlerSaw, want)
	}
	seer.mu.Lock()
	claims, effects, completes := seer.seen[idem.StageClaim], seer.seen[idem.StageEffect], seer.seen[idem.StageComplete]
	seer.mu.Unlock()
	if len(claims) != 3 || claims[0] != "tp-1" || claims[1] != "tp-2" || claims[2] != "tp-3" {
		t.Errorf("claims saw %v", claims)
	}
	if len(effects) != 2 || effects[0] != "tp-1" || len(completes) != 1 || completes[0] != "tp-1" {
		t.Errorf("effects saw %v, completes %v", effects, completes)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(results) != 3 || results[0].Outcome != consumer.Processed || results[1].Outcome != consumer.Duplicate ||
		results[2].Outcome != consumer.Failed || results[2].Err == nil {
		t.Errorf("results: %+v", results)
	}
	if n := b.count("order/1"); n != 1 {
		t.Errorf("effect ran %d times", n)
	}
	// A nil message is rejected without calling Trace.
	if r := c.Handle(ctx, nil); r.Outcome != consumer.Rejected || !errors.Is(r.Err, idem.ErrInvalidInput) || len(results) != 3 {
		t.Errorf("nil message: %+v, %d results", r, len(results))
	}
}
