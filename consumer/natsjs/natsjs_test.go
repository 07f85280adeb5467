package natsjs_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/consumer/internal/pgbench"
	"github.com/idemkit/idem/consumer/natsjs"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/memstore"
)

// broker makes a fresh stream and durable consumer for each test.
type broker struct{ ackWait time.Duration }

type queue struct {
	url     string
	js      jetstream.JetStream
	stream  string
	subject string
	ackWait time.Duration
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("connect NATS: %v", err)
	}
	return nc
}

func (b broker) NewQueue(t testing.TB) consumertest.Queue { return newQueue(t, b.ackWait) }

func newQueue(t testing.TB, ackWait time.Duration) *queue {
	t.Helper()
	url := testenv.NATSURL(t)
	if url == "" {
		return nil
	}
	nc := connect(t, url)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	id := randHex(6)
	q := &queue{url: url, js: js, stream: "IDEMTEST_" + id, subject: "idemtest." + id, ackWait: ackWait}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: q.stream, Subjects: []string{q.subject}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), q.stream) })
	if _, err := js.CreateOrUpdateConsumer(ctx, q.stream, jetstream.ConsumerConfig{
		Durable: "work", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 1000,
	}); err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	return q
}

func (q *queue) Publish(ctx context.Context, body []byte) error {
	_, err := q.js.Publish(ctx, q.subject, body)
	return err
}

type worker struct {
	cancel context.CancelFunc
	done   chan struct{}
	kill   func()
}

func (w *worker) Stop()                 { w.cancel(); <-w.done }
func (w *worker) Done() <-chan struct{} { return w.done }
func (w *worker) Kill()                 { w.kill() }

// Start runs natsjs.Run on its own connection; a crash closes that connection without acking.
func (q *queue) Start(ctx context.Context, c *consumer.Consumer, crash func() bool) (consumertest.Worker, error) {
	nc, err := nats.Connect(q.url, nats.MaxReconnects(0))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	cons, err := js.Consumer(ctx, q.stream, "work")
	if err != nil {
		nc.Close()
		return nil, err
	}
	opt := natsjs.WithBeforeAck(natsjs.Options{Concurrency: 4, Logger: quiet()}, func(consumer.Result) bool {
		if crash != nil && crash() {
			nc.Close()
			return true
		}
		return false
	})
	rctx, cancel := context.WithCancel(ctx)
	w := &worker{cancel: cancel, done: make(chan struct{}), kill: nc.Close}
	go func() {
		defer close(w.done)
		defer nc.Close()
		_ = natsjs.Run(rctx, cons, c, opt)
	}()
	return w, nil
}

func (q *queue) Pending(ctx context.Context) (int, error) {
	cons, err := q.js.Consumer(ctx, q.stream, "work")
	if err != nil {
		return 0, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.NumPending) + info.NumAckPending, nil
}

func TestConformance(t *testing.T) {
	t.Parallel()
	consumertest.Run(t, broker{ackWait: 2 * time.Second}, consumertest.Options{Redelivery: 2 * time.Second})
}

// setup returns a queue and a JetStream consumer on it.
func setup(t *testing.T, ackWait time.Duration) (*queue, jetstream.Consumer) {
	q := newQueue(t, ackWait)
	cons, err := q.js.Consumer(context.Background(), q.stream, "work")
	if err != nil {
		t.Fatal(err)
	}
	return q, cons
}

func orderKey(m *consumer.Message) (string, error) {
	id, _, ok := strings.Cut(string(m.Body), ";")
	if !ok || id == "" {
		return "", errors.New("no order id")
	}
	return "order/" + id, nil
}

func newConsumer(t *testing.T, h consumer.Handler, opt consumer.Options) *consumer.Consumer {
	t.Helper()
	e, err := idem.New(memstore.New(), idem.Options{Lease: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	opt.Key = orderKey
	opt.Runner = e
	c, err := consumer.New(opt, h)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A slow effect is marked in progress, so JetStream does not redeliver it to another consumer
// while it runs although it outlasts AckWait; without the marks it is redelivered, and the
// duplicate is held off by the idem claim (OutcomeInFlight) instead.
func TestInProgressKeepsSlowMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		every       time.Duration
		wantRedeliv bool
	}{
		{"InProgress", 300 * time.Millisecond, false},
		{"NoInProgress", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q, cons := setup(t, time.Second)
			var runs, deliveries atomic.Int64
			var inflight atomic.Int64
			c := newConsumer(t, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
				runs.Add(1)
				time.Sleep(2500 * time.Millisecond)
				return nil, nil
			}, consumer.Options{InFlightDelay: 200 * time.Millisecond, OnEvent: func(ev consumer.Event) {
				r := ev.Result

				deliveries.Add(1)
				if r.Outcome == consumer.OutcomeInFlight {
					inflight.Add(1)
				}
			}})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- natsjs.Run(ctx, cons, c, natsjs.Options{Concurrency: 2, InProgressEvery: tc.every}) }()
			if err := q.Publish(ctx, []byte("slow;1")); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				n, _ := q.Pending(context.Background())
				if n == 0 && runs.Load() > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("message still pending (%d)", n)
				}
				time.Sleep(50 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if runs.Load() != 1 {
				t.Fatalf("effect ran %d times", runs.Load())
			}
			if got := inflight.Load() > 0; got != tc.wantRedeliv {
				t.Fatalf("redelivered while in progress: %v (%d deliveries, %d in flight), want %v",
					got, deliveries.Load(), inflight.Load(), tc.wantRedeliv)
			}
		})
	}
}

// OutcomeFailed messages are nak'd and come back; rejected ones are terminated and never do.
func TestSettle(t *testing.T) {
	t.Parallel()
	q, cons := setup(t, 5*time.Second)
	var mu sync.Mutex
	seen := map[string][]consumer.Outcome{}
	var attempts atomic.Int64
	c := newConsumer(t, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		switch string(m.Body) {
		case "flaky;1":
			if attempts.Add(1) < 3 {
				return nil, errors.New("transient")
			}
		case "poison;1":
			return nil, consumer.Reject(errors.New("unknown product"))
		}
		return []byte("ok"), nil
	}, consumer.Options{RetryDelay: 50 * time.Millisecond, OnEvent: func(ev consumer.Event) {
		m, r := ev.Message, ev.Result

		mu.Lock()
		seen[string(m.Body)] = append(seen[string(m.Body)], r.Outcome)
		mu.Unlock()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- natsjs.Run(ctx, cons, c, natsjs.Options{}) }()
	for _, b := range []string{"flaky;1", "poison;1", "nokey", "fine;1", "fine;1"} {
		if err := q.Publish(ctx, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := q.Pending(ctx)
		mu.Lock()
		flaky := len(seen["flaky;1"])
		mu.Unlock()
		if n == 0 && flaky >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending %d, seen %v", n, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a terminated message that came back would show now
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]string{
		"flaky;1":  "[failed failed executed]",
		"poison;1": "[rejected]",
		"nokey":    "[rejected]",
	}
	for body, w := range want {
		if got := outcomes(seen[body]); got != w {
			t.Errorf("%s: %s, want %s", body, got, w)
		}
	}
	// The two copies of fine;1 may be handled at once: the duplicate's outcome can be observed
	// before the original's. Exactly one is processed, the other answered as a duplicate.
	fine := slices.Clone(seen["fine;1"])
	slices.Sort(fine)
	if want := []consumer.Outcome{consumer.OutcomeExecuted, consumer.OutcomeReplay}; !slices.Equal(fine, want) {
		t.Errorf("fine;1: %s, want one executed and one replay", outcomes(seen["fine;1"]))
	}
}

func outcomes(os []consumer.Outcome) string {
	s := make([]string, len(os))
	for i, o := range os {
		s[i] = o.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(context.Context, *consumer.Message) ([]byte, error) { return nil, nil }, consumer.Options{})
	if _, err := natsjs.Handler(context.Background(), c, natsjs.Options{Concurrency: -1}); !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), "Concurrency") {
		t.Fatalf("got %v", err)
	}
	if _, err := natsjs.Handler(context.Background(), nil, natsjs.Options{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("nil consumer: %v", err)
	}
	if err := natsjs.Run(context.Background(), nil, c, natsjs.Options{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("nil jetstream consumer: %v", err)
	}
}

// noDedup is a deliberately broken store that remembers nothing: every delivery claims.
type noDedup struct{}

func (noDedup) Reserve(_ context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	now := req.Now
	return idem.Reservation{Claimed: true, Record: idem.Record{Key: req.Key, Fingerprint: req.Fingerprint, State: idem.StateInProgress,
		Token: now.UnixMicro(), LeaseUntil: now.Add(req.Lease), Attempts: 1, CreatedAt: now, ExpiresAt: now.Add(req.TTL)}}, nil
}
func (noDedup) Complete(context.Context, string, int64, idem.Response, time.Time, time.Time) error {
	return nil
}
func (noDedup) Release(context.Context, string, int64) error           { return nil }
func (noDedup) Extend(context.Context, string, int64, time.Time) error { return nil }
func (noDedup) Get(context.Context, string) (idem.Record, error) {
	return idem.Record{}, idem.ErrNotFound
}
func (noDedup) Sweep(context.Context, time.Time, int) (int, error) { return 0, nil }

// The suite's crash scenario must catch a consumer that does not deduplicate.
func TestSuiteCatchesDoubleEffects(t *testing.T) {
	t.Parallel()
	r := consumertest.CrashReport(t, broker{ackWait: 2 * time.Second}, consumertest.Options{
		CrashMessages: 200, Redelivery: 2 * time.Second,
		Store: func(*testing.T) idem.Store { return noDedup{} },
	})
	if r.Effects <= r.Events || len(r.Doubles) == 0 {
		t.Fatalf("without deduplication the scenario found %d effects for %d events: it does not bite", r.Effects, r.Events)
	}
	t.Logf("without deduplication: %d effects for %d events, e.g. %v", r.Effects, r.Events, r.Doubles[:min(3, len(r.Doubles))])
}

// Throughput with and without idem, side by side (see docs/bench/consumers.md).
func BenchmarkThroughput(b *testing.B) {
	consumertest.Throughput(b, broker{ackWait: 30 * time.Second}, consumertest.BenchOptions{Stores: pgbench.Stores(b)})
}
