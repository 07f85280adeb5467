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
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/sqs"
	"github.com/idemkit/idem/store/memstore"
)

func newEngine(t testing.TB, st idem.Store, opt idem.Options) *idem.Engine {
	t.Helper()
	if st == nil {
		st = memstore.New()
	}
	opt.Logger = quiet()
	e, err := idem.New(st, opt)
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
				t.Error("Run did not return within 30s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newWorker(t *testing.T, api sqs.API, c *consumer.Consumer, opt sqs.WorkerOptions) *sqs.Worker {
	t.Helper()
	if opt.WaitTime == 0 {
		opt.WaitTime = time.Second
	}
	if opt.Logger == nil {
		opt.Logger = testLogger(t)
	}
	w, err := sqs.NewWorker(api, c, opt)
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

// checkOnce fails t unless the effect ran exactly once for each of want keys.
func checkOnce(t *testing.T, b *bundle, want int) {
	t.Helper()
	counts := b.counts(t)
	if len(counts) != want {
		t.Errorf("effects ran for %d keys, want %d: %v", len(counts), want, counts)
	}
	for k, n := range counts {
		if n != 1 {
			t.Errorf("effect for %s ran %d times", k, n)
		}
	}
}

// An SNS topic fans each event out to two queues, one with raw delivery and one with the SNS
// envelope; the producer publishes every event three times (each publish a new SNS message with
// new SQS message ids). Keyed on the order id, every effect runs exactly once per consuming
// service (a scope per queue); and when one service consumes both queues, once in all.
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
			for range copies {
				for i := range events {
					b.publish(t, topic, orderBody(fmt.Sprintf("o-%d", i), 100*i))
				}
			}

			engine := newEngine(t, nil, idem.Options{})
			var mu sync.Mutex
			seen := map[string]map[string]*consumer.Message{} // order key → SQS message id → message
			effect := func(ctx context.Context, key string, m *consumer.Message) error {
				return b.effect(ctx, key, m.ID)
			}
			for _, url := range []string{rawURL, envURL} {
				scope := url[strings.LastIndexByte(url, '/')+1:]
				if shared {
					scope = "billing"
				}
				c := newConsumer(t, engine, scope, effect, func(m *consumer.Message, r consumer.Result) {
					k, _ := orderKey(m)
					mu.Lock()
					defer mu.Unlock()
					if seen[k] == nil {
						seen[k] = map[string]*consumer.Message{}
					}
					seen[k][m.ID] = m
				})
				run(t, newWorker(t, b.sqs, c, sqs.WorkerOptions{QueueURL: url, Concurrency: 4}))
			}
			eventually(t, 30*time.Second, "both queues drained", func() bool {
				return b.pending(t, rawURL) == 0 && b.pending(t, envURL) == 0
			})

			if shared {
				checkOnce(t, b, events)
			} else {
				checkOnce(t, b, 2*events)
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range events {
				byID := seen[fmt.Sprintf("order/o-%d", i)]
				if len(byID) != 2*copies {
					t.Fatalf("order o-%d came in %d distinct SQS messages, want %d: transport ids are not the key", i, len(byID), 2*copies)
				}
				raw, env := 0, 0
				want := orderBody(fmt.Sprintf("o-%d", i), 100*i)
				for _, m := range byID {
					if string(m.Body) != want {
						t.Errorf("body after unwrapping %q, want %q", m.Body, want)
					}
					switch {
					case m.Subject == topic:
						env++
						if got := m.Header["source"]; len(got) != 1 || got[0] != "test" {
							t.Errorf("envelope attributes not carried: %v", m.Header)
						}
					case strings.HasSuffix(rawURL, "/"+m.Subject):
						raw++
					default:
						t.Errorf("subject %q is neither the topic nor the raw queue", m.Subject)
					}
				}
				if raw != copies || env != copies {
					t.Errorf("order o-%d: %d raw and %d enveloped messages, want %d each", i, raw, env, copies)
				}
			}
		})
	}
}

// Many duplicates of each event, sent with fresh message ids in random order, consumed by three
// workers (three processes sharing one store) at once: every effect runs exactly once and
// every message is deleted.
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

	store := memstore.New()
	var workers []*sqs.Worker
	for range 3 {
		c := newConsumer(t, newEngine(t, store, idem.Options{}), "svc", func(ctx context.Context, key string, m *consumer.Message) error {
			time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
			return b.effect(ctx, key, "dups")
		})
		w := newWorker(t, b.sqs, c, sqs.WorkerOptions{QueueURL: url, Concurrency: 8, VisibilityTimeout: 2 * time.Second})
		workers = append(workers, w)
		run(t, w)
	}
	eventually(t, 60*time.Second, "queue drained", func() bool { return b.pending(t, url) == 0 })
	checkOnce(t, b, events)
	// A worker counts a deletion once the server has answered it, which may be just after the
	// queue shows empty.
	var deleted, inflight int64
	count := func() bool {
		deleted, inflight = 0, 0
		for _, w := range workers {
			s := w.Stats()
			deleted += s.Deleted
			inflight += s.InFlight
		}
		return deleted == events*copies
	}
	for deadline := time.Now().Add(5 * time.Second); !count() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if deleted != events*copies {
		t.Errorf("deleted %d messages, want %d", deleted, events*copies)
	}
	t.Logf("%d messages, %d deferred as in flight elsewhere", events*copies, inflight)
}

// A handler that fails leaves the message; it comes back when its visibility timeout ends,
// marked redelivered, and the effect then runs once.
func TestFailureRedeliveredAfterVisibilityTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, _ := b.queue(t, "redeliver", nil)
	b.send(t, url, []string{orderBody("o-1", 1)})
	var attempts atomic.Int32
	var redelivered []bool
	var mu sync.Mutex
	c := newConsumer(t, newEngine(t, nil, idem.Options{}), "svc", func(ctx context.Context, key string, m *consumer.Message) error {
		mu.Lock()
		redelivered = append(redelivered, m.Redelivered)
		mu.Unlock()
		if attempts.Add(1) == 1 {
			return errors.New("downstream refused")
		}
		return b.effect(ctx, key, "redeliver")
	})
	start := time.Now()
	w := newWorker(t, b.sqs, c, sqs.WorkerOptions{QueueURL: url, VisibilityTimeout: time.Second})
	run(t, w)
	eventually(t, 15*time.Second, "message deleted", func() bool { return w.Stats().Deleted == 1 })
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("redelivered after %s, before the 1s visibility timeout", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(redelivered) != 2 || redelivered[0] || !redelivered[1] {
		t.Errorf("redelivered flags %v, want [false true]", redelivered)
	}
	checkOnce(t, b, 1)
	if s := w.Stats(); s.Failed != 1 || s.Deleted != 1 {
		t.Errorf("stats %+v", s)
	}
}

// A failed message with a consumer RetryDelay is hidden for that long, not for the rest of the
// visibility timeout.
func TestFailureRetryDelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, _ := b.queue(t, "retry", nil)
	b.send(t, url, []string{orderBody("o-1", 1)})
	var attempts atomic.Int32
	c, err := consumer.New(consumer.Options{Runner: newEngine(t, nil, idem.Options{}), Key: orderKey, RetryDelay: time.Second, Logger: quiet()}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		if attempts.Add(1) == 1 {
			return nil, errors.New("downstream refused")
		}
		return nil, b.effect(ctx, "svc/order/o-1", "retry")
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w := newWorker(t, b.sqs, c, sqs.WorkerOptions{QueueURL: url, VisibilityTimeout: 30 * time.Second})
	run(t, w)
	eventually(t, 10*time.Second, "message handled after its 1s retry delay, not its 30s visibility timeout",
		func() bool { return w.Stats().Deleted == 1 })
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("redelivered after %s, before the 1s retry delay", took)
	}
	checkOnce(t, b, 1)
}

// While an effect runs longer than the visibility timeout, the worker keeps the message hidden:
// a second worker on the queue never gets it. Without extension it does, and the consumer
// defers it as in flight; either way the effect runs once.
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
				c := newConsumer(t, newEngine(t, store, idem.Options{Lease: 10 * time.Second}), "svc",
					func(ctx context.Context, key string, m *consumer.Message) error {
						time.Sleep(3500 * time.Millisecond) // well past the 1s visibility timeout
						return b.effect(ctx, key, "slow")
					},
					func(*consumer.Message, consumer.Result) { deliveries.Add(1) })
				w := newWorker(t, b.sqs, c, sqs.WorkerOptions{QueueURL: url, VisibilityTimeout: time.Second, ExtendEvery: every})
				workers = append(workers, w)
				run(t, w)
			}
			// (A delete with the receipt handle of an earlier receive may or may not delete
			// the message, on AWS as on fauxqs: wait for the queue, not for a count.)
			eventually(t, 20*time.Second, "message deleted", func() bool { return b.pending(t, url) == 0 })
			checkOnce(t, b, 1)
			n := deliveries.Load()
			inflight := workers[0].Stats().InFlight + workers[1].Stats().InFlight
			extended := workers[0].Stats().Extended + workers[1].Stats().Extended
			if extend && (n != 1 || inflight != 0 || extended < 5) {
				t.Errorf("with extension: %d deliveries (%d in flight), %d extensions; want 1 delivery", n, inflight, extended)
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
	effect := func(ctx context.Context, key string, m *consumer.Message) error { return b.effect(ctx, key, "main") }
	bad := newWorker(t, failDeletes{b.sqs}, newConsumer(t, newEngine(t, store, idem.Options{}), "svc", effect),
		sqs.WorkerOptions{QueueURL: url, VisibilityTimeout: time.Second, Logger: quiet()})
	stopBad := run(t, bad)
	eventually(t, 30*time.Second, "messages moved to the DLQ", func() bool {
		return b.pending(t, url) == 0 && b.pending(t, dlqURL) == events
	})
	stopBad()
	if s := bad.Stats(); s.Received != 2*events {
		t.Errorf("main queue: %d receives, want %d (maxReceiveCount 2)", s.Received, 2*events)
	}

	var dups atomic.Int32
	c := newConsumer(t, newEngine(t, store, idem.Options{}), "svc", effect, func(_ *consumer.Message, r consumer.Result) {
		if r.Outcome == consumer.OutcomeReplay {
			dups.Add(1)
		}
	})
	run(t, newWorker(t, b.sqs, c, sqs.WorkerOptions{QueueURL: dlqURL}))
	eventually(t, 30*time.Second, "DLQ drained", func() bool { return b.pending(t, dlqURL) == 0 })
	checkOnce(t, b, events)
	if n := dups.Load(); n != events {
		t.Errorf("%d duplicates in the redrive, want %d", n, events)
	}
}

// Stopping the worker lets the handlers under way finish and deletes their messages; Run
// returns only then.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, _ := b.queue(t, "stop", nil)
	b.send(t, url, []string{orderBody("o-1", 1), orderBody("o-2", 2), orderBody("o-3", 3)})
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	var ctxErr atomic.Value
	c := newConsumer(t, newEngine(t, nil, idem.Options{}), "svc", func(ctx context.Context, key string, m *consumer.Message) error {
		started <- struct{}{}
		<-release
		if ctx.Err() != nil {
			ctxErr.Store(ctx.Err())
		}
		return b.effect(ctx, key, "stop")
	})
	w := newWorker(t, b.sqs, c, sqs.WorkerOptions{QueueURL: url, Concurrency: 3, VisibilityTimeout: 5 * time.Second})
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
	checkOnce(t, b, 3)
}

// A stop during a long poll lets the poll finish instead of abandoning it: an abandoned poll can
// still take a message off the queue, which would then stay hidden for a whole visibility timeout.
func TestStopDuringLongPollLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url, _ := b.queue(t, "poll", nil)
	c := newConsumer(t, newEngine(t, nil, idem.Options{}), "svc", func(ctx context.Context, key string, m *consumer.Message) error {
		return b.effect(ctx, key, "poll")
	})
	opt := sqs.WorkerOptions{QueueURL: url, WaitTime: 3 * time.Second, VisibilityTimeout: 30 * time.Second}
	stop := run(t, newWorker(t, b.sqs, c, opt))
	time.Sleep(300 * time.Millisecond) // the worker is now in a long poll on the empty queue
	stop()
	b.send(t, url, []string{orderBody("o-1", 1)})
	run(t, newWorker(t, b.sqs, c, opt))
	eventually(t, 10*time.Second, "the message handled well before its 30s visibility timeout", func() bool {
		return len(b.counts(t)) == 1 && b.pending(t, url) == 0
	})
	checkOnce(t, b, 1)
}

func TestNewWorkerOptions(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, newEngine(t, nil, idem.Options{}), "svc", func(context.Context, string, *consumer.Message) error { return nil })
	api := &awssqs.Client{}
	cases := map[string]sqs.WorkerOptions{
		"QueueURL":          {},
		"MaxMessages":       {QueueURL: "q", MaxMessages: 11},
		"WaitTime":          {QueueURL: "q", WaitTime: 21 * time.Second},
		"VisibilityTimeout": {QueueURL: "q", VisibilityTimeout: 1500 * time.Millisecond},
		"ExtendEvery":       {QueueURL: "q", VisibilityTimeout: 2 * time.Second, ExtendEvery: 3 * time.Second},
		"Concurrency":       {QueueURL: "q", Concurrency: -1},
		"ShutdownTimeout":   {QueueURL: "q", ShutdownTimeout: -time.Second},
	}
	for field, opt := range cases {
		_, err := sqs.NewWorker(api, c, opt)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v does not name the field or match ErrInvalidInput", field, err)
		}
	}
	if _, err := sqs.NewWorker(api, c, sqs.WorkerOptions{QueueURL: "q"}); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if _, err := sqs.NewWorker(nil, c, sqs.WorkerOptions{QueueURL: "q"}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("nil API: %v", err)
	}
	if _, err := sqs.NewWorker(api, nil, sqs.WorkerOptions{QueueURL: "q"}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("nil consumer: %v", err)
	}
}
