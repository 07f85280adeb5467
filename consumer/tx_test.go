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
	"github.com/idemkit/idem/consumer/internal/pgtx"
)

// txConsumer returns a consumer in transaction mode whose handler writes the effect row of
// the message's order through the runner's transaction, then runs then (when set).
func txConsumer(t *testing.T, env *pgtx.Env, then func(id string) error) *consumer.Consumer {
	t.Helper()
	c, err := consumer.New(consumer.Options{Runner: env.Runner, Key: orderKey, Logger: discard()}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		id := strings.SplitN(string(m.Body), ":", 3)[1]
		if err := env.Add(ctx, id); err != nil {
			return nil, err
		}
		if then != nil {
			if err := then(id); err != nil {
				return nil, err
			}
		}
		return []byte("charged " + id), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// check asserts how many effect rows order id has, and how many idem records (all completed)
// the store holds.
func check(t *testing.T, env *pgtx.Env, id string, rows, records int) {
	t.Helper()
	counts, err := env.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	all, completed, err := env.Records(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if counts[id] != rows || all != records || completed != records {
		t.Fatalf("order %s: %d effect rows, %d records (%d completed); want %d rows, %d completed records",
			id, counts[id], all, completed, rows, records)
	}
}

// Many deliveries of one event at once, in transaction mode: one row, one OutcomeExecuted; the
// others wait on the first one's claim and replay its result.
func TestTxRunnerConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	env := pgtx.New(t)
	if env == nil {
		return
	}
	c := txConsumer(t, env, nil)
	const orders, copies = 5, 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[consumer.Outcome]int{}
	for o := range orders {
		for i := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := c.Handle(context.Background(), &consumer.Message{Body: fmt.Appendf(nil, "order:%d:x", o), ID: fmt.Sprint(i)})
				mu.Lock()
				outcomes[r.Outcome]++
				mu.Unlock()
				if r.Outcome == consumer.OutcomeReplay && string(r.Output) != fmt.Sprintf("charged %d", o) {
					t.Errorf("duplicate of order %d got output %q", o, r.Output)
				}
			}()
		}
	}
	wg.Wait()
	if outcomes[consumer.OutcomeExecuted] != orders || outcomes[consumer.OutcomeReplay] != orders*(copies-1) {
		t.Fatalf("outcomes %v, want %d processed and %d duplicates", outcomes, orders, orders*(copies-1))
	}
	counts, err := env.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for o := range orders {
		if n := counts[fmt.Sprint(o)]; n != 1 {
			t.Errorf("order %d: %d effect rows, want 1", o, n)
		}
	}
}

// A handler that fails after writing its row leaves neither the row nor a record: OutcomeFailed,
// and the redelivery runs it, once.
func TestTxRunnerHandlerErrorLeavesNothing(t *testing.T) {
	t.Parallel()
	env := pgtx.New(t)
	if env == nil {
		return
	}
	boom := errors.New("card declined by a flaky gateway")
	fail := true
	c := txConsumer(t, env, func(string) error {
		if fail {
			return boom
		}
		return nil
	})
	m := &consumer.Message{Body: []byte("order:7:x")}
	if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeFailed || !errors.Is(r.Err, boom) {
		t.Fatalf("first delivery: %v %v, want Failed with the handler's error", r.Outcome, r.Err)
	}
	check(t, env, "7", 0, 0)
	fail = false
	if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeExecuted {
		t.Fatalf("redelivery: %v %v, want Processed", r.Outcome, r.Err)
	}
	if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeReplay {
		t.Fatalf("third delivery: %v %v, want Duplicate", r.Outcome, r.Err)
	}
	check(t, env, "7", 1, 1)
}

// A handler that panics after writing its row rolls it back with the claim; the panic goes
// on (the adapter's process dies and the broker redelivers), and the redelivery runs it once.
func TestTxRunnerHandlerPanicLeavesNothing(t *testing.T) {
	t.Parallel()
	env := pgtx.New(t)
	if env == nil {
		return
	}
	panics := true
	c := txConsumer(t, env, func(string) error {
		if panics {
			panic("nil map in the handler")
		}
		return nil
	})
	m := &consumer.Message{Body: []byte("order:8:x")}
	func() {
		defer func() {
			if p := recover(); p != "nil map in the handler" {
				t.Fatalf("recovered %v, want the handler's panic", p)
			}
		}()
		c.Handle(context.Background(), m)
		t.Fatal("Handle returned although the handler panicked")
	}()
	check(t, env, "8", 0, 0)
	panics = false
	if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeExecuted {
		t.Fatalf("redelivery: %v %v, want Processed", r.Outcome, r.Err)
	}
	check(t, env, "8", 1, 1)
}

// A commit that fails after the handler succeeded: nothing of the effect stands, so the
// delivery must not be acked (OutcomeFailed, matching idem.ErrStoreUnavailable), and its redelivery
// runs the effect once. Acking it would lose the event.
func TestTxRunnerFailedCommitIsNotAcked(t *testing.T) {
	t.Parallel()
	env := pgtx.New(t)
	if env == nil {
		return
	}
	c := txConsumer(t, env, nil)
	env.Doom("9")
	m := &consumer.Message{Body: []byte("order:9:x")}
	r := c.Handle(context.Background(), m)
	if r.Outcome != consumer.OutcomeFailed || r.Outcome.Ack() || !errors.Is(r.Err, idem.ErrStoreUnavailable) {
		t.Fatalf("delivery whose commit failed: %v (ack %v) %v, want Failed, not acked, matching ErrStoreUnavailable",
			r.Outcome, r.Outcome.Ack(), r.Err)
	}
	check(t, env, "9", 0, 0)
	if err := env.Open(context.Background(), "9"); err != nil {
		t.Fatal(err)
	}
	if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeExecuted {
		t.Fatalf("redelivery: %v %v, want Processed", r.Outcome, r.Err)
	}
	check(t, env, "9", 1, 1)
}
