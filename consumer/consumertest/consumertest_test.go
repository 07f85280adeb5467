package consumertest_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/consumertest"
)

// memBroker is a broker in memory with at-least-once delivery: a delivery is held by its
// worker until acked; a worker that dies gives back every delivery it held. It shows that the
// suite needs nothing but the broker under test.
type memBroker struct{}

func (memBroker) NewQueue(testing.TB) consumertest.Queue {
	return &memQueue{inflight: map[int]*memWorker{}, bodies: map[int][]byte{}}
}

type memQueue struct {
	mu       sync.Mutex
	next     int
	ready    []int
	bodies   map[int][]byte
	inflight map[int]*memWorker // delivery -> holder
}

func (q *memQueue) Publish(_ context.Context, body []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.next++
	q.bodies[q.next] = body
	q.ready = append(q.ready, q.next)
	return nil
}

func (q *memQueue) Pending(context.Context) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready) + len(q.inflight), nil
}

// take hands the next ready message to w.
func (q *memQueue) take(w *memWorker) (int, []byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.dead.Load() || len(q.ready) == 0 {
		return 0, nil, false
	}
	id := q.ready[0]
	q.ready = q.ready[1:]
	q.inflight[id] = w
	return id, q.bodies[id], true
}

// settle removes the delivery (ack, or dead-letter) or requeues it, if w still holds it.
func (q *memQueue) settle(w *memWorker, id int, requeue bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inflight[id] != w || w.dead.Load() {
		return
	}
	delete(q.inflight, id)
	if requeue {
		q.ready = append(q.ready, id)
	} else {
		delete(q.bodies, id)
	}
}

// die gives back every delivery w holds.
func (q *memQueue) die(w *memWorker) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w.dead.Store(true)
	for id, h := range q.inflight {
		if h == w {
			delete(q.inflight, id)
			q.ready = append(q.ready, id)
		}
	}
}

type memWorker struct {
	q      *memQueue
	dead   atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
}

func (w *memWorker) Stop()                 { w.cancel(); <-w.done }
func (w *memWorker) Kill()                 { w.q.die(w); w.cancel() }
func (w *memWorker) Done() <-chan struct{} { return w.done }

func (q *memQueue) Start(ctx context.Context, c *consumer.Consumer, crash func() bool) (consumertest.Worker, error) {
	rctx, cancel := context.WithCancel(ctx)
	w := &memWorker{q: q, cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rctx.Err() == nil && !w.dead.Load() {
				id, body, ok := q.take(w)
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				r := c.Handle(context.WithoutCancel(rctx), &consumer.Message{Body: body, ID: strconv.Itoa(id)})
				switch {
				case r.Outcome.Ack():
					if crash != nil && crash() {
						q.die(w)
						cancel()
						return
					}
					q.settle(w, id, false)
				case r.Outcome == consumer.OutcomeRejected:
					q.settle(w, id, false)
				default:
					time.Sleep(r.RetryAfter)
					q.settle(w, id, true)
				}
			}
		}()
	}
	go func() { wg.Wait(); close(w.done) }()
	return w, nil
}

// The suite runs against a broker in memory, with no service at all.
func TestRunInMemory(t *testing.T) {
	t.Parallel()
	consumertest.Run(t, memBroker{}, consumertest.Options{})
}
