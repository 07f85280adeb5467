package redisstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/consumer/redisstream"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/memstore"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// minIdle is how long the tests' entries stay pending with a dead consumer before another
// takes them over.
const minIdle = time.Second

// broker makes a fresh stream (its own key) and group for each test.
type broker struct{}

func (broker) NewQueue(t testing.TB) consumertest.Queue { return newQueue(t) }

type queue struct {
	rdb           *redis.Client
	stream, group string
}

func newQueue(t testing.TB) *queue {
	t.Helper()
	addr := testenv.RedisAddr(t)
	if addr == "" {
		return nil
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	q := &queue{rdb: rdb, stream: "idemtest:stream:" + randHex(6), group: "g"}
	ctx := context.Background()
	if err := rdb.XGroupCreateMkStream(ctx, q.stream, q.group, "0").Err(); err != nil {
		t.Fatalf("create group: %v", err)
	}
	t.Cleanup(func() {
		_ = rdb.Del(context.Background(), q.stream).Err()
		_ = rdb.Close()
	})
	return q
}

// Publish adds body as a new entry (a new entry id: a fresh transport id).
func (q *queue) Publish(ctx context.Context, body []byte) error {
	return q.rdb.XAdd(ctx, &redis.XAddArgs{Stream: q.stream, Values: []any{"body", body}}).Err()
}

func (q *queue) options() redisstream.Options {
	return redisstream.Options{Stream: q.stream, Group: q.group, Concurrency: 4, Block: 200 * time.Millisecond,
		MinIdle: minIdle, ClaimEvery: 100 * time.Millisecond, Logger: quiet()}
}

type worker struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	kill   func()
}

func (w *worker) Stop()                 { w.once.Do(w.cancel); <-w.done }
func (w *worker) Done() <-chan struct{} { return w.done }
func (w *worker) Kill()                 { w.kill() }

// Start runs a Worker under a consumer name of its own (a process); a crash stops it at once,
// acking nothing more: its pending entries are taken over by the others after minIdle.
func (q *queue) Start(ctx context.Context, c *consumer.Consumer, crash func() bool) (consumertest.Worker, error) {
	rctx, cancel := context.WithCancel(ctx)
	w := &worker{cancel: cancel, done: make(chan struct{})}
	opt := redisstream.WithBeforeAck(q.options(), func(consumer.Result) bool {
		if crash != nil && crash() {
			cancel()
			return true
		}
		return false
	})
	rw, err := redisstream.NewWorker(q.rdb, c, opt)
	if err != nil {
		cancel()
		return nil, err
	}
	w.kill = func() { redisstream.Kill(rw); cancel() }
	go func() {
		defer close(w.done)
		_ = rw.Run(rctx)
	}()
	return w, nil
}

// Pending returns the group's entries not yet delivered (lag) plus those delivered and not
// acked (its pending entries list).
func (q *queue) Pending(ctx context.Context) (int, error) {
	gs, err := q.rdb.XInfoGroups(ctx, q.stream).Result()
	if err != nil {
		return 0, err
	}
	for _, g := range gs {
		if g.Name == q.group {
			if g.Lag < 0 {
				return 0, errors.New("the group's lag is unknown")
			}
			return int(g.Lag + g.Pending), nil
		}
	}
	return 0, errors.New("no group")
}

func TestConformance(t *testing.T) {
	t.Parallel()
	consumertest.Run(t, broker{}, consumertest.Options{Redelivery: minIdle})
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
	e, err := idem.New(memstore.New(), idem.Options{Lease: 5 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	opt.Key, opt.Logger = orderKey, quiet()
	opt.Runner = e
	c, err := consumer.New(opt, h)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewWorkerValidates(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(context.Context, *consumer.Message) ([]byte, error) { return nil, nil }, consumer.Options{})
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	ok := redisstream.Options{Stream: "s", Group: "g"}
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
		c    *consumer.Consumer
		opt  func(o *redisstream.Options)
		want string
	}{
		{"nil client", nil, c, func(*redisstream.Options) {}, "client is nil"},
		{"nil consumer", rdb, nil, func(*redisstream.Options) {}, "consumer is nil"},
		{"no stream", rdb, c, func(o *redisstream.Options) { o.Stream = "" }, "Stream"},
		{"no group", rdb, c, func(o *redisstream.Options) { o.Group = "" }, "Group"},
		{"negative concurrency", rdb, c, func(o *redisstream.Options) { o.Concurrency = -1 }, "Concurrency"},
		{"negative min idle", rdb, c, func(o *redisstream.Options) { o.MinIdle = -time.Second }, "MinIdle"},
	} {
		opt := ok
		tc.opt(&opt)
		if _, err := redisstream.NewWorker(tc.rdb, tc.c, opt); !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want idem.ErrInvalidInput naming %s", tc.name, err, tc.want)
		}
	}
	w, err := redisstream.NewWorker(rdb, c, ok)
	if err != nil {
		t.Fatal(err)
	}
	if o := w.Options(); o.Consumer == "" || o.MinIdle != 30*time.Second || o.ClaimEvery != 3*time.Second || o.BodyField != "body" || o.StartID != "0" {
		t.Fatalf("defaults: %+v", o)
	}
}

func TestMessage(t *testing.T) {
	t.Parallel()
	m := redisstream.Message(redis.XMessage{ID: "1-2", Values: map[string]any{"body": "b", "order_id": "o-1", "n": int64(3)}}, "body")
	if string(m.Body) != "b" || m.ID != "1-2" || m.Header["order_id"][0] != "o-1" || m.Header["n"][0] != "3" || len(m.Header) != 2 {
		t.Fatalf("%+v", m)
	}
}

// runWorker runs a worker for c on q until the test ends.
func runWorker(t *testing.T, q *queue, c *consumer.Consumer, opt redisstream.Options) (stop func()) {
	t.Helper()
	w, err := redisstream.NewWorker(q.rdb, c, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An entry that a consumer read and never acked (the process died) is taken over with
// XAUTOCLAIM once it has been idle for MinIdle, not before, and handled and acked.
func TestReclaimAfterMinIdle(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	ctx := context.Background()
	if err := q.Publish(ctx, []byte("o-1;charge")); err != nil {
		t.Fatal(err)
	}
	// A consumer that dies right after reading.
	if err := q.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: q.group, Consumer: "dead",
		Streams: []string{q.stream, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	read := time.Now()
	var mu sync.Mutex
	var at time.Time
	c := newConsumer(t, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		mu.Lock()
		at = time.Now()
		mu.Unlock()
		return nil, nil
	}, consumer.Options{})
	opt := q.options()
	runWorker(t, q, c, opt)
	waitUntil(t, "the entry acked", func() bool {
		n, err := q.Pending(ctx)
		return err == nil && n == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if at.IsZero() {
		t.Fatal("the entry was acked without its effect")
	}
	if idle := at.Sub(read); idle < opt.MinIdle {
		t.Fatalf("taken over after %s, before MinIdle %s", idle, opt.MinIdle)
	}
}

// An effect that outlasts MinIdle keeps its entry (the worker claims it again every MinIdle/3),
// so that another worker does not take it over meanwhile.
func TestSlowEffectKeepsEntry(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
	ctx := context.Background()
	var mu sync.Mutex
	var outcomes []string
	runs := 0
	c := newConsumer(t, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		mu.Lock()
		runs++
		mu.Unlock()
		time.Sleep(3 * minIdle)
		return nil, nil
	}, consumer.Options{InFlightDelay: 100 * time.Millisecond, OnEvent: func(ev consumer.Event) {
		r := ev.Result

		mu.Lock()
		outcomes = append(outcomes, r.Outcome.String())
		mu.Unlock()
	}})
	runWorker(t, q, c, q.options())
	runWorker(t, q, c, q.options())
	if err := q.Publish(ctx, []byte("o-2;slow")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the effect", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) > 0 && outcomes[len(outcomes)-1] == "executed"
	})
	waitUntil(t, "the entry acked", func() bool {
		n, err := q.Pending(ctx)
		return err == nil && n == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if runs != 1 || len(outcomes) != 1 {
		t.Fatalf("%d runs, outcomes %v: the entry was taken over while its effect ran", runs, outcomes)
	}
}
