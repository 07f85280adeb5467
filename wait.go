package idem

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// waiters wakes in-process waiters on a key as soon as this process finishes the effect.
// Waiters on an effect run by another process find out by polling the store.
type waiters struct {
	n  atomic.Int64 // waiters registered; done skips the lock when zero
	mu sync.Mutex
	m  map[string]chan struct{}
}

// wait blocks until key is finished here, d passes, or ctx ends (its error is returned).
func (w *waiters) wait(ctx context.Context, key string, d time.Duration) error {
	w.mu.Lock()
	if w.m == nil {
		w.m = make(map[string]chan struct{})
	}
	ch, ok := w.m[key]
	if !ok {
		ch = make(chan struct{})
		w.m[key] = ch
	}
	w.n.Add(1)
	w.mu.Unlock()
	defer w.n.Add(-1)

	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// done wakes every waiter on key.
func (w *waiters) done(key string) {
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	if ch, ok := w.m[key]; ok {
		close(ch)
		delete(w.m, key)
	}
	w.mu.Unlock()
}
