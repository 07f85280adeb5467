package idem

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// waiters wakes in-process waiters on a key as soon as this process finishes the effect.
// Waiters on an effect run by another process find out by polling the store. A key's entry
// lives while someone waits on it: the last waiter to leave removes it, so keys whose effect
// ran elsewhere leave nothing behind.
type waiters struct {
	n  atomic.Int64 // waiters registered; done skips the lock when zero
	mu sync.Mutex
	m  map[string]*waitEntry
}

type waitEntry struct {
	ch chan struct{} // closed when the key is finished here
	n  int           // waiters on it; guarded by waiters.mu
}

// wait blocks until key is finished here, d passes, or ctx ends (its error is returned).
func (w *waiters) wait(ctx context.Context, key string, d time.Duration) error {
	w.mu.Lock()
	if w.m == nil {
		w.m = make(map[string]*waitEntry)
	}
	e, ok := w.m[key]
	if !ok {
		e = &waitEntry{ch: make(chan struct{})}
		w.m[key] = e
	}
	e.n++
	w.n.Add(1)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		e.n--
		if e.n == 0 && w.m[key] == e {
			delete(w.m, key)
		}
		w.n.Add(-1)
		w.mu.Unlock()
	}()

	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.ch:
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
	if e, ok := w.m[key]; ok {
		close(e.ch)
		delete(w.m, key)
	}
	w.mu.Unlock()
}
