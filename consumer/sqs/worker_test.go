package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/store/memstore"
)

func newEngine(t *testing.T, opt idem.Options) *idem.Engine {
	t.Helper()
	e, err := idem.New(memstore.New(), opt)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// run starts w and returns a func that stops it and waits for Run to return.
func run(t *testing.T, w *sqs.Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-errc:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return within 30s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newWorker(t *testing.T, api sqs.API, h sqs.Handler, opt sqs.WorkerOptions) *sqs.Worker {
	t.Helper()
	opt.WaitTime = cmpOr(opt.WaitTime, time.Second)
	if opt.Logger == nil {
		opt.Logger = testLogger(t)
	}
	w, err := sqs.NewWorker(api, h, opt)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// testLogger logs to t, so that a failing test shows what its workers said.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// An SNS topic fans each event out to two queues, one with raw delivery and one with the SNS
// envelope; the producer publishes every event three times (each publish a new SNS message with
// new SQS message ids). Keyed on the order id, every effect runs exactly once per consuming
// service; and when one service consumes both queues it runs once in all.
func TestFanOutRawAndEnvelope(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared_scope=%v", shared), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rawURL, rawARN := b.queue(t, "raw", nil)
			envURL, envARN := b.queue(t, "env", nil)
			topic := b.topic(t, "orders", []string{rawARN, envARN}, []bool{true, false})

			const events, copies = 20, 3
			var want []string
			for i := range events {
				want = append(want, fmt.Sprintf("o-%d", i))
			}
			for range copies {
				for i, id := range want {
					b.publish(t, topic, orderBody(id, 100*i))
				}
			}

			engine := newEngine(t, idem.Options{})
			var mu sync.Mutex
			seen := map[string][]*sqs.Message{} // order id → deliveries, both queues
			effect := func(ctx context.Context, key string, m *sqs.Message) error {
				return b.effect(ctx, key, m.MessageID)
			}
			for _, url := range []string{rawURL, envURL} {
				scope := queueName(url)
				if shared {
					scope = "billing"
				}
				inner := idempotent(engine, scope, effect)
				h := func(ctx context.Context, m *sqs.Message) error {
					k, _ := orderKey(m)
					mu.Lock()
					seen[k] = append(seen[k], m)
					mu.Unlock()
					return inner(ctx, m)
				}
				run(t, newWorker(t, b.sqs, h, sqs.WorkerOptions{QueueURL: url, Concurrency: 4}))
			}
			eventually(t, 30*time.Second, "both queues drained", func() bool {
				return b.pending(t, rawURL) == 0 && b.pending(t, envURL) == 0
			})

			counts := b.counts(t)
			wantKeys := events * 2
			if shared {
				wantKeys = events
			}
			if len(counts) != wantKeys {
				t.Fatalf("effects ran for %d keys, want %d", len(counts), wantKeys)
			}
			for k, n := range counts {
				if n != 1 {
					t.Errorf("effect for %s ran %d times", k, n)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range want {
				// Deliveries deferred as in flight elsewhere come again: count messages by id.
				byID := map[string]*sqs.Message{}
				for _, m := range seen["order/"+id] {
					byID[m.MessageID] = m
				}
				if len(byID) != 2*copies {
					t.Fatalf("order %s came in %d distinct SQS messages, want %d: transport ids are not the key", id, len(byID), 2*copies)
				}
				raw, env := 0, 0
				for _, m := range byID {
					if string(m.Body) != string(seen["order/"+id][0].Body) {
						t.Errorf("order %s: bodies differ after unwrapping: %q vs %q", id, m.Body, seen["order/"+id][0].Body)
					}
					if m.SNS != nil {
						env++
						if m.Attributes["source"] != "test" || m.SNS.MessageID == "" {
							t.Errorf("envelope not carried: %+v %v", m.SNS, m.Attributes)
						}
					} else {
						raw++
					}
				}
				if raw != copies || env != copies {
					t.Errorf("order %s: %d raw and %d enveloped messages, want %d each", id, raw, env, copies)
				}
			}
		})
	}
}

// Many duplicates of each event, sent with fresh message ids in random order, consumed by three
// workers at once: every effect runs exactly once and every message is deleted.
func TestDuplicatesConcurrentWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, _ := b.queue(t, "dups", nil)
	const events, copies = 60, 5
	var bodies []string
	for i := range events {
		for range copies {
			bodies = append(bodies, orderBody(fmt.Sprintf("o-%d", i), i))
		}
	}
	rand.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	b.send(t, url, bodies)

	// One engine per worker, sharing one store: three consumer processes.
	store := memstore.New()
	var workers []*sqs.Worker
	for range 3 {
		e, err := idem.New(store, idem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		h := idempotent(e, "svc", func(ctx context.Context, key string, m *sqs.Message) error {
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			return b.effect(ctx, key, "dups")
		})
		w := newWorker(t, b.sqs, h, sqs.WorkerOptions{QueueURL: url, Concurrency: 8, VisibilityTimeout: 2 * time.Second})
		workers = append(workers, w)
		run(t, w)
	}
	eventually(t, 60*time.Second, "queue drained", func() bool { return b.pending(t, url) == 0 })
	counts := b.counts(t)
	if len(counts) != events {
		t.Fatalf("effects for %d keys, want %d", len(counts), events)
	}
	for k, n := range counts {
		if n != 1 {
			t.Errorf("effect for %s ran %d times", k, n)
		}
	}
	var deleted, inflight int64
	for _, w := range workers {
		s := w.Stats()
		deleted += s.Deleted
		inflight += s.InFlight
	}
	if deleted != events*copies {
		t.Errorf("deleted %d messages, want %d", deleted, events*copies)
	}
	t.Logf("%d messages, %d deferred as in flight elsewhere", events*copies, inflight)
}

// A handler that fails leaves the message; it comes back when its visibility timeout ends, with
// a higher receive count, and the effect then runs once.
func TestFailureRedeliveredAfterVisibilityTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, _ := b.queue(t, "redeliver", nil)
	b.send(t, url, []string{orderBody("o-1", 1)})
	engine := newEngine(t, idem.Options{})
	var attempts atomic.Int32
	var counts []int
	var mu sync.Mutex
	h := idempotent(engine, "svc", func(ctx context.Context, key string, m *sqs.Message) error {
		mu.Lock()
		counts = append(counts, m.ReceiveCount)
		mu.Unlock()
		if attempts.Add(1) == 1 {
			return errors.New("downstream refused")
		}
		return b.effect(ctx, key, "redeliver")
	})
	start := time.Now()
	w := newWorker(t, b.sqs, h, sqs.WorkerOptions{QueueURL: url, VisibilityTimeout: time.Second})
	run(t, w)
	eventually(t, 15*time.Second, "message deleted", func() bool { return w.Stats().Deleted == 1 })
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("redelivered after %s, before the 1s visibility timeout", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(counts) != 2 || counts[0] != 1 || counts[1] != 2 {
		t.Errorf("receive counts %v, want [1 2]", counts)
	}
	if c := b.counts(t); c["svc/order/o-1"] != 1 {
		t.Errorf("effect counts %v", c)
	}
	if s := w.Stats(); s.Failed != 1 || s.Deleted != 1 {
		t.Errorf("stats %+v", s)
	}
}

// While a handler runs longer than the visibility timeout, the worker keeps the message hidden:
// a second worker on the queue never gets it. Without extension it does, and idem defers it as
// in flight; either way the effect runs once.
func TestVisibilityExtendedWhileHandling(t *testing.T) {
	t.Parallel()
	for _, extend := range []bool{true, false} {
		t.Run(fmt.Sprintf("extend=%v", extend), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			url, _ := b.queue(t, "slow", nil)
			b.send(t, url, []string{orderBody("o-1", 1)})
			store := memstore.New()
			var deliveries atomic.Int32
			every := 300 * time.Millisecond
			if !extend {
				every = -1
			}
			var workers []*sqs.Worker
			for range 2 {
				e, err := idem.New(store, idem.Options{Lease: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				inner := idempotent(e, "svc", func(ctx context.Context, key string, m *sqs.Message) error {
					time.Sleep(3500 * time.Millisecond) // well past the 1s visibility timeout
					return b.effect(ctx, key, "slow")
				})
				h := func(ctx context.Context, m *sqs.Message) error {
					deliveries.Add(1)
					return inner(ctx, m)
				}
				w := newWorker(t, b.sqs, h, sqs.WorkerOptions{QueueURL: url, VisibilityTimeout: time.Second, ExtendEvery: every})
				workers = append(workers, w)
				run(t, w)
			}
			// (A delete with the receipt handle of an earlier receive may or may not delete
			// the message, on AWS as on fauxqs: wait for the queue, not for a count.)
			eventually(t, 20*time.Second, "message deleted", func() bool { return b.pending(t, url) == 0 })
			if c := b.counts(t); c["svc/order/o-1"] != 1 {
				t.Errorf("effect counts %v", c)
			}
			n := deliveries.Load()
			inflight := workers[0].Stats().InFlight + workers[1].Stats().InFlight
			if extend && (n != 1 || inflight != 0) {
				t.Errorf("with extension: %d deliveries (%d in flight), want 1", n, inflight)
			}
			if !extend && (n < 2 || inflight < 1) {
				t.Errorf("without extension: %d deliveries (%d in flight); the test does not bite", n, inflight)
			}
		})
	}
}

// failDeletes is the real SQS client with deletes that fail before they are sent: a consumer
// that did the work and then could not delete (crashed, lost the connection).
type failDeletes struct{ *awssqs.Client }

func (failDeletes) DeleteMessage(context.Context, *awssqs.DeleteMessageInput, ...func(*awssqs.Options)) (*awssqs.DeleteMessageOutput, error) {
	return nil, errors.New("injected: connection lost before delete")
}

// The effect runs, the delete fails, the message is received again until SQS moves it to the
// dead-letter queue; an operator redrives the dead letters to a consumer: every message is a
// duplicate there and no effect runs twice.
func TestDeleteLostThenDLQRedrive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dlqURL, dlqARN := b.queue(t, "dlq", nil)
	url, _ := b.queue(t, "main", map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"2"}`, dlqARN)})
	const events = 10
	var bodies []string
	for i := range events {
		bodies = append(bodies, orderBody(fmt.Sprintf("o-%d", i), i))
	}
	b.send(t, url, bodies)

	store := memstore.New()
	handler := func() sqs.Handler {
		e, err := idem.New(store, idem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return idempotent(e, "svc", func(ctx context.Context, key string, m *sqs.Message) error {
			return b.effect(ctx, key, "main")
		})
	}
	bad := newWorker(t, failDeletes{b.sqs}, handler(), sqs.WorkerOptions{QueueURL: url, VisibilityTimeout: time.Second})
	stopBad := run(t, bad)
	eventually(t, 30*time.Second, "messages moved to the DLQ", func() bool {
		return b.pending(t, url) == 0 && b.pending(t, dlqURL) == events
	})
	stopBad()
	if s := bad.Stats(); s.Received != 2*events {
		t.Errorf("main queue: %d receives, want %d (maxReceiveCount 2)", s.Received, 2*events)
	}

	redrive := newWorker(t, b.sqs, handler(), sqs.WorkerOptions{QueueURL: dlqURL})
	run(t, redrive)
	eventually(t, 30*time.Second, "DLQ drained", func() bool { return b.pending(t, dlqURL) == 0 })
	counts := b.counts(t)
	if len(counts) != events {
		t.Fatalf("effects for %d keys, want %d", len(counts), events)
	}
	for k, n := range counts {
		if n != 1 {
			t.Errorf("effect for %s ran %d times", k, n)
		}
	}
}

// Stopping the worker lets the handlers under way finish and deletes their messages; Run
// returns only then, and receives nothing more.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, _ := b.queue(t, "stop", nil)
	b.send(t, url, []string{orderBody("o-1", 1), orderBody("o-2", 2), orderBody("o-3", 3)})
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	var ctxErr atomic.Value
	h := func(ctx context.Context, m *sqs.Message) error {
		started <- struct{}{}
		<-release
		if ctx.Err() != nil {
			ctxErr.Store(ctx.Err())
		}
		return nil
	}
	w := newWorker(t, b.sqs, h, sqs.WorkerOptions{QueueURL: url, Concurrency: 3, VisibilityTimeout: 5 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for range 3 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("handlers did not start")
		}
	}
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while handlers were running", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the handlers finished")
	}
	if v := ctxErr.Load(); v != nil {
		t.Errorf("handler context was cancelled by the stop: %v", v)
	}
	if s := w.Stats(); s.Deleted != 3 {
		t.Errorf("stats after stop %+v, want 3 deleted", s)
	}
	if n := b.pending(t, url); n != 0 {
		t.Errorf("%d messages left after a graceful stop", n)
	}
}

func TestNewWorkerOptions(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *sqs.Message) error { return nil }
	api := &awssqs.Client{}
	cases := map[string]sqs.WorkerOptions{
		"QueueURL":          {},
		"MaxMessages":       {QueueURL: "q", MaxMessages: 11},
		"WaitTime":          {QueueURL: "q", WaitTime: 21 * time.Second},
		"VisibilityTimeout": {QueueURL: "q", VisibilityTimeout: 1500 * time.Millisecond},
		"ExtendEvery":       {QueueURL: "q", VisibilityTimeout: 2 * time.Second, ExtendEvery: 3 * time.Second},
		"Concurrency":       {QueueURL: "q", Concurrency: -1},
		"RetryDelay":        {QueueURL: "q", RetryDelay: -time.Second},
		"ShutdownTimeout":   {QueueURL: "q", ShutdownTimeout: -time.Second},
	}
	for field, opt := range cases {
		_, err := sqs.NewWorker(api, h, opt)
		if !errors.Is(err, idem.ErrInvalidInput) || !containsStr(err.Error(), field) {
			t.Errorf("%s: error %v does not name the field or match ErrInvalidInput", field, err)
		}
	}
	if _, err := sqs.NewWorker(api, h, sqs.WorkerOptions{QueueURL: "q"}); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if _, err := sqs.NewWorker(nil, h, sqs.WorkerOptions{QueueURL: "q"}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("nil API: %v", err)
	}
}

func containsStr(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A stop during a long poll lets the poll finish instead of abandoning it: an abandoned poll can
// still take a message off the queue, which would then stay hidden for a whole visibility timeout.
func TestStopDuringLongPollLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, _ := b.queue(t, "poll", nil)
	var got atomic.Int32
	h := func(ctx context.Context, m *sqs.Message) error { got.Add(1); return nil }
	opt := sqs.WorkerOptions{QueueURL: url, WaitTime: 3 * time.Second, VisibilityTimeout: 30 * time.Second}
	stop := run(t, newWorker(t, b.sqs, h, opt))
	time.Sleep(300 * time.Millisecond) // the worker is now in a long poll on the empty queue
	stop()
	b.send(t, url, []string{orderBody("o-1", 1)})
	run(t, newWorker(t, b.sqs, h, opt))
	eventually(t, 10*time.Second, "the message handled well before its 30s visibility timeout", func() bool {
		return got.Load() == 1 && b.pending(t, url) == 0
	})
}
