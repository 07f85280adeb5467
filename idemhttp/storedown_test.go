package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/storehook"
	"github.com/idemkit/idem/store/memstore"
)

// TestStoreDownThroughComplete proves what the package documentation says of a store that
// fails from the moment the handler returns until the engine gives up storing its result: the
// client still gets the handler's answer (without Idempotency-Expires; the event is executed
// with an Err matching idem.ErrStoreUnavailable), but nothing is recorded, so a retry gets 503
// while the store is down, 409 while the claim's lease lasts, and once the lease has run out
// executes: the handler runs a second time.
func TestStoreDownThroughComplete(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	st := storehook.Wrap(memstore.New(), storehook.Hooks{Before: func(context.Context, storehook.Op) error {
		if down.Load() {
			return errors.New("store down (test)")
		}
		return nil
	}})
	const lease = 3 * time.Second
	var runs atomic.Int32
	b := setup(t, st, idem.Options{Lease: lease, StoreTimeout: 200 * time.Millisecond},
		idemhttp.Options{ExpiresHeader: true, Scope: idemhttp.SingleCaller()},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			if n == 1 {
				down.Store(true) // the effect ran; the store goes down before its result is stored
			}
			w.WriteHeader(201)
			fmt.Fprintf(w, "charge %d", n)
		}))

	start := time.Now()
	first := b.do("POST", "/", "k-down", "x")
	if first.Status != 201 || string(first.Body) != "charge 1" || first.Header.Get(idemhttp.ExpiresHeader) != "" {
		t.Fatalf("first answer: %d %q (Idempotency-Expires %q), want the handler's 201 without Idempotency-Expires",
			first.Status, first.Body, first.Header.Get(idemhttp.ExpiresHeader))
	}
	b.mu.Lock()
	ev := b.events[len(b.events)-1]
	b.mu.Unlock()
	if ev.Outcome != idemhttp.OutcomeExecuted || !errors.Is(ev.Err, idem.ErrStoreUnavailable) {
		t.Fatalf("event: %s %v, want executed with ErrStoreUnavailable", ev.Outcome, ev.Err)
	}
	// While the store is down: 503, the handler does not run.
	if r := b.do("POST", "/", "k-down", "x"); r.Status != 503 || problemType(t, r) != idemhttp.ProblemStoreUnavailable {
		t.Fatalf("retry while the store is down: %d %s", r.Status, r.Body)
	}
	// The store is back, but holds only the claim: 409 while its lease lasts.
	down.Store(false)
	r := b.do("POST", "/", "k-down", "x")
	if time.Since(start) < lease-500*time.Millisecond {
		if r.Status != 409 || problemType(t, r) != idemhttp.ProblemInFlight {
			t.Fatalf("retry while the claim's lease lasts: %d %s", r.Status, r.Body)
		}
	}
	// Once the lease has run out, a retry executes: a second run of the handler.
	for r.Status == 409 {
		if time.Since(start) > lease+20*time.Second {
			t.Fatalf("still 409 long after the lease ran out")
		}
		time.Sleep(100 * time.Millisecond)
		r = b.do("POST", "/", "k-down", "x")
	}
	if r.Status != 201 || string(r.Body) != "charge 2" || runs.Load() != 2 {
		t.Fatalf("retry after the lease ran out: %d %q (runs %d), want the handler to run again", r.Status, r.Body, runs.Load())
	}
	if elapsed := time.Since(start); elapsed < lease-time.Second {
		t.Fatalf("executed again after %s, before the lease (%s) could run out", elapsed, lease)
	}
}
