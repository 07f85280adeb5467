package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
		results []consumer.Event
	)
	trace := func(ctx context.Context, m *consumer.Message) (context.Context, func(consumer.Event)) {
		ctx = context.WithValue(ctx, traceKey{}, m.Header["traceparent"][0])
		return ctx, func(r consumer.Event) {
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
	if r := c.Handle(ctx, msg("order:1:a", "tp-1")); r.Outcome != consumer.OutcomeExecuted {
		t.Fatalf("first: %+v", r)
	}
	if r := c.Handle(ctx, msg("order:1:a", "tp-2")); r.Outcome != consumer.OutcomeReplay {
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
	if len(results) != 3 || results[0].Outcome != consumer.OutcomeExecuted || results[1].Outcome != consumer.OutcomeReplay ||
		results[2].Outcome != consumer.OutcomeFailed || results[2].Err == nil || results[0].Message == nil || string(results[0].Message.Body) != "order:1:a" {
		t.Errorf("results: %+v", results)
	}
	if n := b.count("order/1"); n != 1 {
		t.Errorf("effect ran %d times", n)
	}
	// A nil message is rejected without calling Trace.
	if r := c.Handle(ctx, nil); r.Outcome != consumer.OutcomeRejected || !errors.Is(r.Err, idem.ErrInvalidInput) || len(results) != 3 {
		t.Errorf("nil message: %+v, %d results", r, len(results))
	}
}

// TestOnEvent: Options.OnEvent gets one Event per message Handle handled, as Handle returns:
// the message, the very Result Handle returns, and the time Handle took.
func TestOnEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{Logger: discard()})
	var (
		mu     sync.Mutex
		events []consumer.Event
	)
	c := newConsumer(t, b.engine, b.charge, consumer.Options{OnEvent: func(ev consumer.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}})
	ctx := context.Background()
	var got []consumer.Result
	for _, body := range []string{"order:21:a", "order:21:a", "garbage"} {
		got = append(got, c.Handle(ctx, &consumer.Message{Body: []byte(body)}))
	}
	got = append(got, c.Handle(ctx, nil))
	mu.Lock()
	defer mu.Unlock()
	if len(events) != len(got) {
		t.Fatalf("%d events for %d messages", len(events), len(got))
	}
	want := []consumer.Outcome{consumer.OutcomeExecuted, consumer.OutcomeReplay, consumer.OutcomeRejected, consumer.OutcomeRejected}
	for i, ev := range events {
		if ev.Outcome != want[i] || ev.Outcome != got[i].Outcome || ev.Key != got[i].Key || ev.Err != got[i].Err || ev.Duration <= 0 {
			t.Errorf("event %d: %+v, want the Result Handle returned (%+v) and a duration", i, ev, got[i])
		}
		if (i < 3) != (ev.Message != nil) {
			t.Errorf("event %d: message %v", i, ev.Message)
		}
	}
}

// TestZeroConsumerPanics: a Consumer not created with New says so when used.
func TestZeroConsumerPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "create it with New") {
			t.Errorf("panic %v, want one that says to create it with New", r)
		}
	}()
	new(consumer.Consumer).Handle(context.Background(), &consumer.Message{Body: []byte("order:1:a")})
}
