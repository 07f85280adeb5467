package kafka_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/consumer/kafka"
	"github.com/idemkit/idem/store/memstore"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// broker makes a fresh topic (with partitions partitions) and consumer group for each test.
type broker struct{ partitions int32 }

func (b broker) NewQueue(t testing.TB) consumertest.Queue { return newQueue(t, b.partitions) }

type queue struct {
	topic, group string
	prod         *kgo.Client
	adm          *kadm.Client
}

func newQueue(t testing.TB, partitions int32) *queue {
	t.Helper()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	q := &queue{topic: "idemtest-" + randHex(6), group: "idemtest-" + randHex(6), prod: prod, adm: kadm.NewClient(prod)}
	ctx := context.Background()
	if _, err := q.adm.CreateTopic(ctx, partitions, 1, nil, q.topic); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	t.Cleanup(func() {
		_, _ = q.adm.DeleteGroup(context.Background(), q.group)
		_, _ = q.adm.DeleteTopic(context.Background(), q.topic)
	})
	return q
}

// Publish produces body as a new record (a new offset: a fresh transport id) and waits for
// the broker's acknowledgement.
func (q *queue) Publish(ctx context.Context, body []byte) error {
	return q.prod.ProduceSync(ctx, &kgo.Record{Topic: q.topic, Value: body}).FirstErr()
}

// clientOpts are the options of a test worker's client: quick heartbeats, so that a
// rebalance (a worker joining or leaving) takes a fraction of a second.
func (q *queue) clientOpts() []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(q.group),
		kgo.ConsumeTopics(q.topic),
		kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}
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

// Start runs a Worker; a crash stops it at once without marking or committing anything more,
// and its client leaves the group, so that its partitions move at once (a killed process's
// partitions move after the session timeout instead; the effect on the offsets is the same).
func (q *queue) Start(ctx context.Context, c *consumer.Consumer, crash func() bool) (consumertest.Worker, error) {
	opt := kafka.WithBeforeCommit(kafka.Options{Logger: quiet()}, func(consumer.Result) bool {
		return crash != nil && crash()
	})
	kw, err := kafka.NewWorker(c, opt, q.clientOpts()...)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	w := &worker{cancel: cancel, done: make(chan struct{}), kill: func() { kafka.Kill(kw); cancel() }}
	go func() {
		defer close(w.done)
		_ = kw.Run(rctx)
	}()
	return w, nil
}

// Pending returns the group's lag: the records of the topic past the group's committed
// offsets.
func (q *queue) Pending(ctx context.Context) (int, error) {
	ends, err := q.adm.ListEndOffsets(ctx, q.topic)
	if err != nil {
		return 0, err
	}
	committed, err := q.adm.FetchOffsets(ctx, q.group)
	if err != nil {
		return 0, err
	}
	n := 0
	var ferr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = o.Err
			return
		}
		from := int64(0)
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
			from = c.At
		}
		n += int(o.Offset - from)
	})
	return n, ferr
}

func TestConformance(t *testing.T) {
	t.Parallel()
	consumertest.Run(t, broker{partitions: 8}, consumertest.Options{})
}

func TestNewWorkerValidates(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, memstore.New(), func(context.Context, *consumer.Message) ([]byte, error) { return nil, nil }, consumer.Options{})
	for _, tc := range []struct {
		name string
		c    *consumer.Consumer
		opt  kafka.Options
		kopt []kgo.Opt
		want string
	}{
		{"nil consumer", nil, kafka.Options{}, nil, "consumer is nil"},
		{"negative MaxPollRecords", c, kafka.Options{MaxPollRecords: -1}, nil, "MaxPollRecords"},
	} {
		_, err := kafka.NewWorker(tc.c, tc.opt, tc.kopt...)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want idem.ErrInvalidInput naming %s", tc.name, err, tc.want)
		}
	}
	// Without a group, franz-go refuses the commit options the worker needs.
	if _, err := kafka.NewWorker(c, kafka.Options{}, kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("t")); err == nil || !strings.Contains(err.Error(), "group") {
		t.Errorf("no group: %v", err)
	}
}

func orderKey(m *consumer.Message) (string, error) {
	if k := m.Header[kafka.KeyHeader]; len(k) == 1 && k[0] != "" {
		return "order/" + k[0], nil
	}
	return "", errors.New("no order id in the record key")
}

func newConsumer(t *testing.T, st idem.Store, h consumer.Handler, opt consumer.Options) *consumer.Consumer {
	t.Helper()
	e, err := idem.New(st, idem.Options{Lease: 5 * time.Second, Logger: quiet()})
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

// publishKeyed produces n records with keys 0..n-1, round robin over the partitions.
func (q *queue) publishKeyed(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		k := strconv.Itoa(i)
		if err := q.prod.ProduceSync(context.Background(), &kgo.Record{Topic: q.topic, Key: []byte(k), Value: []byte("order " + k)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// committed returns the group's committed offset for a partition (-1: none).
func (q *queue) committed(ctx context.Context, p int32) (int64, error) {
	offs, err := q.adm.FetchOffsets(ctx, q.group)
	if err != nil {
		return 0, err
	}
	if o, ok := offs.Lookup(q.topic, p); ok && o.Err == nil {
		return o.At, nil
	}
	return -1, nil
}

// runWorker runs a worker for c on q until the test ends.
func runWorker(t *testing.T, q *queue, c *consumer.Consumer, opt kafka.Options) (stop func()) {
	t.Helper()
	opt.Logger = quiet()
	w, err := kafka.NewWorker(c, opt, q.clientOpts()...)
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

// While a record's effect runs, the group's committed offset of its partition is at most the
// record's own offset: the worker never commits past a record before its effect is settled.
// A failing first attempt is fetched again (the offset is not committed past it) and succeeds.
func TestCommitsOnlyAfterEffect(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 2)
	const n = 20
	var mu sync.Mutex
	var early []string
	effects := map[string]int{}
	failed := map[string]bool{}
	c := newConsumer(t, memstore.New(), func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		var p int32
		var off int64
		if _, err := fmt.Sscanf(m.ID[len(q.topic):], "/%d@%d", &p, &off); err != nil {
			return nil, consumer.Reject(err)
		}
		at, err := q.committed(ctx, p)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if at > off {
			early = append(early, fmt.Sprintf("%s committed at %d", m.ID, at))
		}
		k := m.Header[kafka.KeyHeader][0]
		if !failed[k] && off%3 == 0 {
			failed[k] = true
			return nil, errors.New("transient")
		}
		effects[k]++
		return nil, nil
	}, consumer.Options{RetryDelay: 20 * time.Millisecond})
	q.publishKeyed(t, n)
	stop := runWorker(t, q, c, kafka.Options{})
	waitUntil(t, "every effect", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(effects) == n
	})
	stop()
	if p, err := q.Pending(context.Background()); err != nil || p != 0 {
		t.Fatalf("pending %d, %v", p, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("offsets committed past records whose effect was running: %v", early)
	}
	for k, e := range effects {
		if e != 1 {
			t.Errorf("order %s: %d effects", k, e)
		}
	}
	if len(failed) == 0 {
		t.Fatal("no record failed: the test did not test failures")
	}
}

// A second worker joining the group while the first is in the middle of a poll's records
// takes over partitions whose records the first had fetched but not yet handled: the first
// finishes the record under way, commits, and leaves the rest to the new owner, which starts
// at the committed offset. Every record is handled once, by one of the two.
func TestRebalanceMidBatch(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 4)
	const n = 40
	st := memstore.New()
	var mu sync.Mutex
	handled := map[string][]string{} // record id -> workers that handled it
	effects := map[string]int{}
	mk := func(name string) *consumer.Consumer {
		return newConsumer(t, st, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			effects[m.Header[kafka.KeyHeader][0]]++
			mu.Unlock()
			return nil, nil
		}, consumer.Options{OnEvent: func(ev consumer.Event) {
			m, r := ev.Message, ev.Result

			mu.Lock()
			handled[m.ID] = append(handled[m.ID], name+":"+r.Outcome.String())
			mu.Unlock()
		}})
	}
	q.publishKeyed(t, n)
	runWorker(t, q, mk("A"), kafka.Options{})
	waitUntil(t, "the first worker's first effects", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) >= 2
	})
	stopB := runWorker(t, q, mk("B"), kafka.Options{})
	waitUntil(t, "every effect", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(effects) == n
	})
	stopB()
	mu.Lock()
	defer mu.Unlock()
	byB := 0
	for id, ws := range handled {
		if len(ws) != 1 {
			t.Errorf("record %s handled %d times: %v", id, len(ws), ws)
		}
		if strings.HasPrefix(ws[0], "B:") {
			byB++
		}
	}
	for k, e := range effects {
		if e != 1 {
			t.Errorf("order %s: %d effects", k, e)
		}
	}
	if len(handled) != n {
		t.Errorf("%d records handled, want %d", len(handled), n)
	}
	// Every record was published before A started, so A's first poll fetched them all:
	// the ones B handled were revoked from A in the middle of that poll's records.
	if byB == 0 {
		t.Fatal("the second worker handled no record: no partition moved")
	}
	t.Logf("%d of %d records handled by the worker that joined mid-batch", byB, n)
}

// A worker that dies after an effect and before committing its offset leaves the record to
// the next owner, which gets it as a replay: the effect does not run twice.
func TestCrashBeforeCommitRedeliversDuplicate(t *testing.T) {
	t.Parallel()
	q := newQueue(t, 1)
	st := memstore.New()
	var mu sync.Mutex
	effects := 0
	var outcomes []string
	c := newConsumer(t, st, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		mu.Lock()
		effects++
		mu.Unlock()
		return nil, nil
	}, consumer.Options{OnEvent: func(ev consumer.Event) {
		r := ev.Result

		mu.Lock()
		outcomes = append(outcomes, r.Outcome.String())
		mu.Unlock()
	}})
	q.publishKeyed(t, 1)
	crashed := make(chan struct{})
	w1, err := q.Start(context.Background(), c, func() bool { close(crashed); return true })
	if err != nil {
		t.Fatal(err)
	}
	<-crashed
	<-w1.Done()
	if p, err := q.Pending(context.Background()); err != nil || p != 1 {
		t.Fatalf("after the crash: pending %d (%v), want the record uncommitted", p, err)
	}
	runWorker(t, q, c, kafka.Options{})
	waitUntil(t, "the redelivery", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) == 2
	})
	waitUntil(t, "the commit", func() bool {
		p, err := q.Pending(context.Background())
		return err == nil && p == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if effects != 1 || outcomes[0] != "executed" || outcomes[1] != "replay" {
		t.Fatalf("%d effects, outcomes %v; want 1 effect, executed then replay", effects, outcomes)
	}
}

func TestMessage(t *testing.T) {
	t.Parallel()
	m := kafka.Message(&kgo.Record{Topic: "orders", Partition: 3, Offset: 42, Key: []byte("o-1"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("1")}, {Key: "h", Value: []byte("2")}}})
	if string(m.Body) != "v" || m.Subject != "orders" || m.ID != "orders/3@42" {
		t.Fatalf("%+v", m)
	}
	if got := m.Header[kafka.KeyHeader]; len(got) != 1 || got[0] != "o-1" {
		t.Fatalf("key header %v", got)
	}
	if got := m.Header["h"]; len(got) != 2 || got[0] != "1" || got[1] != "2" {
		t.Fatalf("headers %v", m.Header)
	}
	if m := kafka.Message(&kgo.Record{Topic: "t"}); m.Header != nil {
		t.Fatalf("no key, no headers: %v", m.Header)
	}
}
