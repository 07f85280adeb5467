package amqp_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/amqp"
	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/consumer/internal/pgbench"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/memstore"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// broker makes a fresh queue on the default exchange for each test.
type broker struct{}

func (broker) NewQueue(t testing.TB) consumertest.Queue { return newQueue(t) }

type queue struct {
	url  string
	name string
	mu   sync.Mutex // the publishing channel, in confirm mode
	pub  *amqp091.Channel
	adm  *amqp091.Channel
}

func newQueue(t testing.TB) *queue {
	t.Helper()
	url := testenv.AMQPURL(t)
	if url == "" {
		return nil
	}
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatalf("connect RabbitMQ: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	pub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	adm, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q := &queue{url: url, name: "idemtest-" + randHex(6), pub: pub, adm: adm}
	if _, err := adm.QueueDeclare(q.name, false, false, false, false, nil); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() { _, _ = adm.QueueDelete(q.name, false, false, false) })
	return q
}

// Publish publishes with a fresh message id and waits for the broker's confirm.
func (q *queue) Publish(ctx context.Context, body []byte) error {
	q.mu.Lock()
	conf, err := q.pub.PublishWithDeferredConfirmWithContext(ctx, "", q.name, false, false,
		amqp091.Publishing{Body: body, MessageId: randHex(8), DeliveryMode: amqp091.Persistent})
	q.mu.Unlock()
	if err != nil {
		return err
	}
	ok, err := conf.WaitContext(ctx)
	if err == nil && !ok {
		err = errors.New("publish nacked by the broker")
	}
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

// dial connects with a dialer that keeps the TCP connection, so that a crash can cut it
// without the AMQP close handshake, as a killed process would.
func dial(url string) (*amqp091.Connection, func(), error) {
	var mu sync.Mutex
	var raw net.Conn
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: func(network, addr string) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, 5*time.Second)
		mu.Lock()
		raw = c
		mu.Unlock()
		return c, err
	}})
	if err != nil {
		return nil, nil, err
	}
	cut := func() {
		mu.Lock()
		defer mu.Unlock()
		_ = raw.Close()
	}
	return conn, cut, nil
}

// Start runs amqp.Run on its own connection; a crash cuts the TCP connection without acking.
func (q *queue) Start(ctx context.Context, c *consumer.Consumer, crash func() bool) (consumertest.Worker, error) {
	conn, cut, err := dial(q.url)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	opt := amqp.WithBeforeAck(amqp.Options{Concurrency: 4, Logger: quiet()}, func(consumer.Result) bool {
		if crash != nil && crash() {
			cut()
			return true
		}
		return false
	})
	rctx, cancel := context.WithCancel(ctx)
	w := &worker{cancel: cancel, done: make(chan struct{}), kill: cut}
	go func() {
		defer close(w.done)
		defer conn.Close()
		_ = amqp.Run(rctx, ch, q.name, c, opt)
	}()
	return w, nil
}

// Pending waits until the broker has noticed that every consumer is gone (a cut connection
// takes a moment; until then its unacked messages are not back in the queue), then returns
// the queue's message count.
func (q *queue) Pending(ctx context.Context) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := q.adm.QueueDeclarePassive(q.name, false, false, false, false, nil)
		if err != nil {
			return 0, err
		}
		if st.Consumers == 0 {
			return st.Messages, nil
		}
		if time.Now().After(deadline) {
			return st.Messages + st.Consumers, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	consumertest.Run(t, broker{}, consumertest.Options{})
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

// OutcomeFailed deliveries are requeued and come back; rejected ones are not requeued.
func TestSettle(t *testing.T) {
	t.Parallel()
	q := newQueue(t)
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
	}, consumer.Options{RetryDelay: 20 * time.Millisecond, OnEvent: func(ev consumer.Event) {
		m, r := ev.Message, ev.Result

		mu.Lock()
		seen[string(m.Body)] = append(seen[string(m.Body)], r.Outcome)
		mu.Unlock()
	}})
	conn, err := amqp091.Dial(q.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- amqp.Run(ctx, ch, q.name, c, amqp.Options{Concurrency: 2}) }()
	for _, b := range []string{"flaky;1", "poison;1", "nokey", "fine;1", "fine;1"} {
		if err := q.Publish(ctx, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(seen["flaky;1"]) + len(seen["poison;1"]) + len(seen["nokey"]) + len(seen["fine;1"])
		mu.Unlock()
		if n >= 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("seen %v", seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // a rejected delivery that came back would show now
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ch.Close()
	if n, err := q.Pending(context.Background()); err != nil || n != 0 {
		t.Fatalf("pending %d %v", n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for body, w := range map[string]string{
		"flaky;1":  "[failed failed executed]",
		"poison;1": "[rejected]",
		"nokey":    "[rejected]",
	} {
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

func TestRunValidates(t *testing.T) {
	t.Parallel()
	c := newConsumer(t, func(context.Context, *consumer.Message) ([]byte, error) { return nil, nil }, consumer.Options{})
	if err := amqp.Run(context.Background(), nil, "q", c, amqp.Options{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("nil channel: %v", err)
	}
	if err := amqp.Run(context.Background(), &amqp091.Channel{}, "q", nil, amqp.Options{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("nil consumer: %v", err)
	}
	if err := amqp.Run(context.Background(), &amqp091.Channel{}, "q", c, amqp.Options{Concurrency: -1}); !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), "Concurrency") {
		t.Fatalf("bad concurrency: %v", err)
	}
}

func TestMessage(t *testing.T) {
	t.Parallel()
	m := amqp.Message(amqp091.Delivery{Body: []byte("b"), RoutingKey: "rk", DeliveryTag: 7, Redelivered: true,
		Headers: amqp091.Table{"s": "v", "n": int32(3), "b": []byte("x"), "skip": amqp091.Table{}}})
	if string(m.Body) != "b" || m.Subject != "rk" || m.ID != "tag:7" || !m.Redelivered {
		t.Fatalf("%+v", m)
	}
	if len(m.Header) != 3 || m.Header["s"][0] != "v" || m.Header["n"][0] != "3" || m.Header["b"][0] != "x" {
		t.Fatalf("headers %v", m.Header)
	}
	if m := amqp.Message(amqp091.Delivery{MessageId: "mid"}); m.ID != "mid" || m.Header != nil {
		t.Fatalf("%+v", m)
	}
}

// Throughput with and without idem, side by side (see docs/bench/consumers.md).
func BenchmarkThroughput(b *testing.B) {
	consumertest.Throughput(b, broker{}, consumertest.BenchOptions{Stores: pgbench.Stores(b)})
}
