package gateway

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

type testKey struct{}

// An upstream call's context keeps the request's values, not its cancellation, and ends no
// sooner than the timeout after the call started and at most a tick later.
func TestUpstreamCallContext(t *testing.T) {
	d := newDeadlines(context.Background(), 160*time.Millisecond) // tick 10ms
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), testKey{}, "v"))
	start := time.Now()
	call := &upstreamCall{Context: parent, deadline: d.get(start)}
	var ctx context.Context = call
	cancelParent() // the client went away

	if ctx.Value(testKey{}) != "v" {
		t.Errorf("request value lost: %v", ctx.Value(testKey{}))
	}
	if got, _ := ctx.Value(callKey{}).(*upstreamCall); got != call {
		t.Error("callKey does not find the call")
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("cancelled with the request: %v", err)
	}
	dl, ok := ctx.Deadline()
	if !ok || dl.Before(start.Add(d.timeout)) || dl.After(start.Add(d.timeout+d.tick)) {
		t.Fatalf("deadline %v after start, want between %v and %v", dl.Sub(start), d.timeout, d.timeout+d.tick)
	}
	// Derived contexts, as the Transport makes, attach to the shared deadline.
	child, cancelChild := context.WithCancelCause(ctx)
	defer cancelChild(nil)
	stopped := make(chan struct{})
	context.AfterFunc(ctx, func() { close(stopped) })
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline never passed")
	}
	if took := time.Since(start); took < d.timeout {
		t.Errorf("ended after %v, before the timeout %v", took, d.timeout)
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Err = %v", ctx.Err())
	}
	select {
	case <-child.Done():
	case <-time.After(time.Second):
		t.Fatal("a derived context did not end with the deadline")
	}
	if !errors.Is(context.Cause(child), context.DeadlineExceeded) {
		t.Errorf("Cause(child) = %v", context.Cause(child))
	}
	select {
	case <-stopped:
	case <-time.After(time.Second):
		t.Fatal("AfterFunc did not run at the deadline")
	}
}

// Calls starting within a tick share one deadline context; later ones get a new one.
func TestDeadlinesShared(t *testing.T) {
	d := newDeadlines(context.Background(), 16*time.Second) // tick 1s
	now := time.Now()
	a, b := d.get(now), d.get(now.Add(500*time.Millisecond))
	if a != b {
		t.Error("two calls within one tick got different deadlines")
	}
	if c := d.get(now.Add(1500 * time.Millisecond)); c == a {
		t.Error("a call after the tick reused the old deadline")
	}
}

// Contexts derived from calls cost no goroutine each (the Transport derives one per call).
func TestUpstreamCallNoGoroutinePerChild(t *testing.T) {
	d := newDeadlines(context.Background(), time.Minute)
	before := runtime.NumGoroutine()
	var cancels []context.CancelFunc
	for range 1000 {
		call := &upstreamCall{Context: context.Background(), deadline: d.get(time.Now())}
		_, cancel := context.WithCancel(call)
		cancels = append(cancels, cancel)
	}
	if grew := runtime.NumGoroutine() - before; grew > 10 {
		t.Errorf("1000 derived contexts started %d goroutines", grew)
	}
	for _, c := range cancels {
		c()
	}
}
