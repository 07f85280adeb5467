package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/storehook"
	"github.com/idemkit/idem/store/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgxpool's health check goroutine ends shortly after Close.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	)
}

// countingStore counts store round trips, to check the costs: one per duplicate, two per new
// message.
type countingStore struct {
	idem.Store
	calls atomic.Int64
}

func newCountingStore(st idem.Store) *countingStore {
	s := new(countingStore)
	s.Store = storehook.Wrap(st, storehook.Hooks{Before: func(context.Context, storehook.Op) error {
		s.calls.Add(1)
		return nil
	}})
	return s
}

type bundle struct {
	store   *countingStore
	mem     *memstore.Store
	engine  *idem.Engine
	effects sync.Map // key → *atomic.Int64
}

func setup(t *testing.T, opt idem.Options) *bundle {
	t.Helper()
	b := &bundle{mem: memstore.New()}
	b.store = newCountingStore(b.mem)
	e, err := idem.New(b.store, opt)
	if err != nil {
		t.Fatal(err)
	}
	b.engine = e
	return b
}

// orderKey takes the key from a body "order:<id>:<anything>".
func orderKey(m *consumer.Message) (string, error) {
	parts := strings.SplitN(string(m.Body), ":", 3)
	if len(parts) < 2 || parts[0] != "order" || parts[1] == "" {
		return "", fmt.Errorf("no order id in %q", m.Body)
	}
	return "order/" + parts[1], nil
}

func (b *bundle) count(key string) int64 {
	v, ok := b.effects.Load(key)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (b *bundle) charge(ctx context.Context, m *consumer.Message) ([]byte, error) {
	k, _ := orderKey(m)
	v, _ := b.effects.LoadOrStore(k, new(atomic.Int64))
	n := v.(*atomic.Int64).Add(1)
	return []byte(fmt.Sprintf("receipt-%s-%d", k, n)), nil
}

func newConsumer(t *testing.T, e *idem.Engine, h consumer.Handler, opt consumer.Options) *consumer.Consumer {
	t.Helper()
	if opt.Key == nil {
		opt.Key = orderKey
	}
	opt.Runner = e
	c, err := consumer.New(opt, h)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestProcessedThenDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	c := newConsumer(t, b.engine, b.charge, consumer.Options{Scope: "billing"})
	ctx := context.Background()

	r := c.Handle(ctx, &consumer.Message{Body: []byte("order:1:42"), ID: "m1"})
	if r.Outcome != consumer.OutcomeExecuted || r.Err != nil || string(r.Output) != "receipt-order/1-1" || r.Key != "billing|order/1" {
		t.Fatalf("first delivery: %+v", r)
	}
	if got := b.store.calls.Load(); got != 2 {
		t.Fatalf("new message: %d store round trips, want 2", got)
	}
	// Same event, new transport id: a duplicate, one round trip, the stored result.
	r = c.Handle(ctx, &consumer.Message{Body: []byte("order:1:42"), ID: "m2", Redelivered: true})
	if r.Outcome != consumer.OutcomeReplay || r.Err != nil || string(r.Output) != "receipt-order/1-1" || !r.Outcome.Ack() {
		t.Fatalf("duplicate: %+v", r)
	}
	if got := b.store.calls.Load(); got != 3 {
		t.Fatalf("duplicate: %d store round trips in all, want 3", got)
	}
	if n := b.count("order/1"); n != 1 {
		t.Fatalf("effect ran %d times", n)
	}
}

func TestScopesAreApart(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	billing := newConsumer(t, b.engine, b.charge, consumer.Options{Scope: "billing"})
	var shipped atomic.Int64
	shipping := newConsumer(t, b.engine, func(context.Context, *consumer.Message) ([]byte, error) {
		shipped.Add(1)
		return nil, nil
	}, consumer.Options{Scope: "shipping"})
	m := &consumer.Message{Body: []byte("order:7:x")}
	for range 3 {
		billing.Handle(context.Background(), m)
		shipping.Handle(context.Background(), m)
	}
	if b.count("order/7") != 1 || shipped.Load() != 1 {
		t.Fatalf("billing ran %d, shipping %d; want 1 and 1", b.count("order/7"), shipped.Load())
	}
}

// Scopes and keys may both hold "/": scope "billing" with key "eu/1" and scope "billing/eu"
// with key "1" are two events, and so are the same key in two scopes and an unscoped key that
// spells a scoped one. Each handler runs once for its own.
func TestScopesAndKeysWithSlashesAreApart(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	ran := map[string]*atomic.Int64{}
	var keys []string
	for _, tc := range []struct{ scope, key string }{
		{"billing", "eu/1"},
		{"billing/eu", "1"}, // "billing/eu/1" under a "/" join, like the one above
		{"billing", "eu/fr/1"},
		{"billing/eu/fr", "1"}, // and this one like the one above
		{"shipping", "eu/1"},   // billing's key in another scope
		{"", "billing|eu/1"},   // an unscoped key that spells billing's first
		{"billing", "eu|1"},    // a key may hold the separator
		{"", "billing|eu|1"},   // and an unscoped one that spells it
	} {
		n := new(atomic.Int64)
		ran[tc.scope+" "+tc.key] = n
		c := newConsumer(t, b.engine, func(context.Context, *consumer.Message) ([]byte, error) {
			n.Add(1)
			return nil, nil
		}, consumer.Options{Scope: tc.scope, Key: func(m *consumer.Message) (string, error) { return string(m.Body), nil }})
		for range 2 {
			// The same body for every consumer, as one event fanned out to every service: a
			// merged record would take it for a duplicate.
			r := c.Handle(context.Background(), &consumer.Message{Body: []byte(tc.key)})
			if r.Outcome != consumer.OutcomeExecuted && r.Outcome != consumer.OutcomeReplay {
				t.Fatalf("scope %q key %q: %v %v", tc.scope, tc.key, r.Outcome, r.Err)
			}
			keys = append(keys, r.Key)
		}
	}
	for what, n := range ran {
		if n.Load() != 1 {
			t.Errorf("scope and key %q: handler ran %d times, want 1", what, n.Load())
		}
	}
	if want := idem.ScopedKey("billing", "eu/1"); keys[0] != want {
		t.Errorf("key %q, want %q", keys[0], want)
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name    string
		body    string
		handler consumer.Handler
		want    consumer.Outcome
		is      error
	}{
		{"no key", "garbage", nil, consumer.OutcomeRejected, nil},
		{"handler error", "order:2:a", func(context.Context, *consumer.Message) ([]byte, error) { return nil, boom }, consumer.OutcomeFailed, boom},
		{"uncertain", "order:3:a", func(context.Context, *consumer.Message) ([]byte, error) { return nil, idem.Uncertain(boom) }, consumer.OutcomeFailed, idem.ErrUncertain},
		{"rejected by handler", "order:4:a", func(context.Context, *consumer.Message) ([]byte, error) { return nil, consumer.Reject(boom) }, consumer.OutcomeRejected, consumer.ErrRejected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, idem.Options{})
			h := tc.handler
			if h == nil {
				h = b.charge
			}
			c := newConsumer(t, b.engine, h, consumer.Options{RetryDelay: time.Second})
			r := c.Handle(context.Background(), &consumer.Message{Body: []byte(tc.body)})
			if r.Outcome != tc.want || r.Outcome.Ack() || r.Err == nil {
				t.Fatalf("got %v (%v), want %v", r.Outcome, r.Err, tc.want)
			}
			if tc.is != nil && !errors.Is(r.Err, tc.is) {
				t.Fatalf("error %v does not match %v", r.Err, tc.is)
			}
			if r.Outcome == consumer.OutcomeFailed && r.RetryAfter != time.Second {
				t.Fatalf("RetryAfter %s, want Options.RetryDelay", r.RetryAfter)
			}
		})
	}
}

func TestFailedIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	var calls atomic.Int64
	c := newConsumer(t, b.engine, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		if calls.Add(1) == 1 {
			return nil, errors.New("transient")
		}
		return []byte("ok"), nil
	}, consumer.Options{})
	m := &consumer.Message{Body: []byte("order:5:a")}
	if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeFailed {
		t.Fatalf("first: %v", r.Outcome)
	}
	if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeExecuted {
		t.Fatalf("retry: %v %v", r.Outcome, r.Err)
	}
	if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeReplay || string(r.Output) != "ok" {
		t.Fatalf("then: %v %q", r.Outcome, r.Output)
	}
}

func TestMismatchIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	c := newConsumer(t, b.engine, b.charge, consumer.Options{})
	c.Handle(context.Background(), &consumer.Message{Body: []byte("order:6:100")})
	r := c.Handle(context.Background(), &consumer.Message{Body: []byte("order:6:999")})
	if r.Outcome != consumer.OutcomeRejected || !errors.Is(r.Err, idem.ErrMismatch) {
		t.Fatalf("got %v %v", r.Outcome, r.Err)
	}
	// A fingerprint over the business fields only: a changed timestamp is still a duplicate.
	c2 := newConsumer(t, b.engine, b.charge, consumer.Options{Scope: "fp", Fingerprint: func(m *consumer.Message) (string, error) {
		k, err := orderKey(m)
		return idem.Fingerprint([]byte(k)), err
	}})
	c2.Handle(context.Background(), &consumer.Message{Body: []byte("order:8:t1")})
	if r := c2.Handle(context.Background(), &consumer.Message{Body: []byte("order:8:t2")}); r.Outcome != consumer.OutcomeReplay {
		t.Fatalf("custom fingerprint: %v %v", r.Outcome, r.Err)
	}
	c3 := newConsumer(t, b.engine, b.charge, consumer.Options{Fingerprint: func(*consumer.Message) (string, error) { return "nothex", nil }})
	if r := c3.Handle(context.Background(), &consumer.Message{Body: []byte("order:9:a")}); r.Outcome != consumer.OutcomeRejected || !errors.Is(r.Err, idem.ErrInvalidInput) {
		t.Fatalf("bad fingerprint: %v %v", r.Outcome, r.Err)
	}
}

func TestInFlightAndBrokerExtension(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{Lease: 3 * time.Second})
	started, release := make(chan struct{}), make(chan struct{})
	c := newConsumer(t, b.engine, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		close(started)
		<-release
		return nil, nil
	}, consumer.Options{InFlightDelay: 500 * time.Millisecond})
	var extends atomic.Int64
	done := make(chan consumer.Result)
	go func() {
		done <- c.Handle(context.Background(), &consumer.Message{Body: []byte("order:10:a"),
			ExtendEvery: 20 * time.Millisecond,
			Extend:      func(context.Context) error { extends.Add(1); return nil }})
	}()
	<-started
	r := c.Handle(context.Background(), &consumer.Message{Body: []byte("order:10:a")})
	if r.Outcome != consumer.OutcomeInFlight || !errors.Is(r.Err, idem.ErrInFlight) || r.RetryAfter != 500*time.Millisecond {
		t.Fatalf("concurrent duplicate: %v %v %s", r.Outcome, r.Err, r.RetryAfter)
	}
	// The extensions go on, every 20ms, for as long as the effect runs (waited for, not
	// timed: a loaded machine may delay the timer).
	for deadline := time.Now().Add(10 * time.Second); extends.Load() < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("broker extended %d times in 10s at 20ms, want several", extends.Load())
		}
	}
	close(release)
	if r := <-done; r.Outcome != consumer.OutcomeExecuted {
		t.Fatalf("holder: %v %v", r.Outcome, r.Err)
	}
	n := extends.Load()
	time.Sleep(60 * time.Millisecond)
	if extends.Load() != n {
		t.Fatal("extension went on after Handle returned")
	}
}

func TestStoreDownFailsClosed(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	c := newConsumer(t, b.engine, b.charge, consumer.Options{})
	b.mem.Close()
	r := c.Handle(context.Background(), &consumer.Message{Body: []byte("order:11:a")})
	if r.Outcome != consumer.OutcomeFailed || !errors.Is(r.Err, idem.ErrStoreUnavailable) || b.count("order/11") != 0 {
		t.Fatalf("got %v %v, effects %d", r.Outcome, r.Err, b.count("order/11"))
	}
}

// failComplete is a store whose Complete fails: the effect ran but cannot be recorded.
type failComplete struct{ idem.Store }

func (failComplete) Complete(context.Context, string, int64, idem.Response, time.Time, time.Time) error {
	return errors.New("disk full")
}

func TestEffectDoneButNotRecordedIsAcked(t *testing.T) {
	t.Parallel()
	e, err := idem.New(failComplete{memstore.New()}, idem.Options{StoreTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	c := newConsumer(t, e, func(context.Context, *consumer.Message) ([]byte, error) { ran.Add(1); return []byte("r"), nil }, consumer.Options{Logger: discard()})
	r := c.Handle(context.Background(), &consumer.Message{Body: []byte("order:12:a")})
	if r.Outcome != consumer.OutcomeExecuted || !r.Outcome.Ack() || !errors.Is(r.Err, idem.ErrStoreUnavailable) || ran.Load() != 1 {
		t.Fatalf("got %v %v ran %d", r.Outcome, r.Err, ran.Load())
	}
}

func TestLargeResultNotStored(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	big := make([]byte, 100)
	c := newConsumer(t, b.engine, func(context.Context, *consumer.Message) ([]byte, error) { return big, nil }, consumer.Options{MaxResult: 10})
	m := &consumer.Message{Body: []byte("order:13:a")}
	if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeExecuted || len(r.Output) != 100 || !r.OutputOmitted {
		t.Fatalf("first: %+v", r)
	}
	if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeReplay || r.Output != nil || !r.OutputOmitted {
		t.Fatalf("duplicate: %+v", r)
	}
}

// Many goroutines deliver duplicates of many events at once: each effect runs exactly once,
// and every delivery ends OutcomeExecuted or OutcomeReplay once nothing is in flight.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	c := newConsumer(t, b.engine, b.charge, consumer.Options{InFlightDelay: time.Millisecond})
	const events, copies = 200, 8
	var wg sync.WaitGroup
	var processed atomic.Int64
	for i := range events * copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := &consumer.Message{Body: []byte(fmt.Sprintf("order:%d:x", i%events)), ID: fmt.Sprint(i)}
			for {
				r := c.Handle(context.Background(), m)
				if r.Outcome == consumer.OutcomeInFlight {
					time.Sleep(r.RetryAfter)
					continue
				}
				if r.Outcome == consumer.OutcomeExecuted {
					processed.Add(1)
				} else if r.Outcome != consumer.OutcomeReplay {
					t.Errorf("delivery %d: %v %v", i, r.Outcome, r.Err)
				}
				return
			}
		}()
	}
	wg.Wait()
	if processed.Load() != events {
		t.Fatalf("%d processed, want %d", processed.Load(), events)
	}
	for i := range events {
		if n := b.count(fmt.Sprintf("order/%d", i)); n != 1 {
			t.Fatalf("order %d: effect ran %d times", i, n)
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	e, _ := idem.New(memstore.New(), idem.Options{})
	h := func(context.Context, *consumer.Message) ([]byte, error) { return nil, nil }
	cases := []struct {
		name  string
		e     *idem.Engine
		h     consumer.Handler
		opt   consumer.Options
		field string
	}{
		{"nil runner", nil, h, consumer.Options{Key: orderKey}, "Options.Runner"},
		{"nil handler", e, nil, consumer.Options{Key: orderKey}, "handler"},
		{"no key", e, h, consumer.Options{}, "Options.Key"},
		{"retry delay", e, h, consumer.Options{Key: orderKey, RetryDelay: -1}, "Options.RetryDelay"},
		{"in-flight delay", e, h, consumer.Options{Key: orderKey, InFlightDelay: -1}, "Options.InFlightDelay"},
		{"scope too long", e, h, consumer.Options{Key: orderKey, Scope: strings.Repeat("s", idem.MaxScopeLen+1)}, "Options.Scope"},
		{"scope with the separator", e, h, consumer.Options{Key: orderKey, Scope: "billing|eu"}, "Options.Scope"},
		{"scope with a control character", e, h, consumer.Options{Key: orderKey, Scope: "billing\n"}, "Options.Scope"},
		{"scope not UTF-8", e, h, consumer.Options{Key: orderKey, Scope: "billing\xff"}, "Options.Scope"},
	}
	for _, tc := range cases {
		if tc.e != nil {
			tc.opt.Runner = tc.e
		}
		_, err := consumer.New(tc.opt, tc.h)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.HasPrefix(err.Error(), "consumer: invalid options: "+tc.field) {
			t.Errorf("%s: %v", tc.name, err)
		}
		if strings.HasPrefix(tc.name, "scope") && (err == nil || !strings.HasPrefix(err.Error(), "consumer: ")) {
			t.Errorf("%s: %q does not name the package first", tc.name, err)
		}
	}
	for _, scope := range []string{"", "billing/eu", strings.Repeat("s", idem.MaxScopeLen), "ключ"} {
		if _, err := consumer.New(consumer.Options{Runner: e, Key: orderKey, Scope: scope}, h); err != nil {
			t.Errorf("scope %.20q: %v", scope, err)
		}
	}
	c, _ := consumer.New(consumer.Options{Runner: e, Key: orderKey}, h)
	if r := c.Handle(context.Background(), nil); r.Outcome != consumer.OutcomeRejected {
		t.Errorf("nil message: %v", r.Outcome)
	}
	if r := c.Handle(context.Background(), &consumer.Message{Body: []byte("order:" + strings.Repeat("k", 600) + ":")}); r.Outcome != consumer.OutcomeRejected {
		t.Errorf("key too long: %v", r.Outcome)
	}
}

// A record names the subject its message came from as its route; a message without a subject
// leaves none.
func TestRecordRouteIsTheSubject(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	c := newConsumer(t, b.engine, b.charge, consumer.Options{})
	ctx := context.Background()
	for _, tc := range []struct{ body, subject string }{
		{"order:r1:1", "orders.created"},
		{"order:r2:1", "billing.invoiced"},
		{"order:r3:1", ""},
	} {
		if r := c.Handle(ctx, &consumer.Message{Body: []byte(tc.body), Subject: tc.subject}); r.Outcome != consumer.OutcomeExecuted {
			t.Fatalf("%s: %+v", tc.body, r)
		}
		key, _ := orderKey(&consumer.Message{Body: []byte(tc.body)})
		rec, err := b.mem.Get(ctx, idem.ScopedKey("", key))
		if err != nil {
			t.Fatal(err)
		}
		if rec.Route != tc.subject {
			t.Errorf("%s: record's route %q, want the subject %q", tc.body, rec.Route, tc.subject)
		}
	}
}
