package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// The heartbeat lives as long as the effect runs, not as long as its caller waits: a caller
// that gives up (an HTTP client that disconnects while a detached upstream call goes on) must
// not let the lease lapse under an effect still running, or a retry would run it twice.
func TestHeartbeatOutlivesCaller(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	const lease = 300 * time.Millisecond
	a, _ := idem.New(st, idem.Options{Lease: lease, Heartbeat: lease / 6, Logger: quiet})
	other, _ := idem.New(st, idem.Options{Lease: lease, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int32
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := a.Do(ctx, "detached", fp1, func(context.Context) (idem.Response, error) {
			runs.Add(1)
			close(started)
			time.Sleep(4 * lease) // goes on whatever the caller does, as a detached call does
			return idem.Response{Status: 201, Body: []byte("first")}, nil
		})
		done <- err
	}()
	<-started
	cancel() // the caller goes away at once
	for deadline := time.Now().Add(3 * lease); time.Now().Before(deadline); time.Sleep(lease / 4) {
		if _, err := other.Do(context.Background(), "detached", fp1, effect(&runs, 201, "second")); !errors.Is(err, idem.ErrInFlight) {
			t.Fatalf("while the effect runs: %v, want ErrInFlight (runs %d)", err, runs.Load())
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("first Do: %v", err)
	}
	res, err := other.Do(context.Background(), "detached", fp1, effect(&runs, 201, "second"))
	if err != nil || !res.Replayed || string(res.Response.Body) != "first" || runs.Load() != 1 {
		t.Fatalf("after the effect: %+v, %v, runs %d; want the first response replayed, 1 run", res, err, runs.Load())
	}
}

// A duplicate with another fingerprint gets ErrMismatch while the key is in flight, whether it
// fails fast or waits, and from another process too; never ErrInFlight.
func TestMismatchWhileInFlight(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		t.Run(fmt.Sprint("wait=", wait), func(t *testing.T) {
			t.Parallel()
			st := memstore.New()
			holder, _ := idem.New(st, idem.Options{Logger: quiet, Wait: wait})
			remote, _ := idem.New(st, idem.Options{Logger: quiet, Wait: wait, PollInterval: time.Millisecond})
			release, started := make(chan struct{}), make(chan struct{})
			holderDone := make(chan struct{})
			go func() {
				defer close(holderDone)
				_, _ = holder.Do(context.Background(), "k", fp1, func(context.Context) (idem.Response, error) {
					close(started)
					<-release
					return idem.Response{Status: 201}, nil
				})
			}()
			<-started
			var runs atomic.Int32
			var wg sync.WaitGroup
			errs := make([]error, 64)
			for i := range errs {
				eng := holder
				if i%2 == 1 {
					eng = remote
				}
				wg.Go(func() {
					_, errs[i] = eng.Do(context.Background(), "k", fp2, effect(&runs, 200, ""))
				})
			}
			wg.Wait()
			close(release)
			<-holderDone
			for i, err := range errs {
				if !errors.Is(err, idem.ErrMismatch) || errors.Is(err, idem.ErrInFlight) {
					t.Fatalf("duplicate %d with another fingerprint: %v, want ErrMismatch", i, err)
				}
			}
			if runs.Load() != 0 {
				t.Fatalf("the mismatched effect ran %d times", runs.Load())
			}
		})
	}
}

// Waiters on an effect run by another process leave nothing behind in this one.
func TestWaitersDoNotLeak(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	holder, _ := idem.New(st, idem.Options{Logger: quiet})
	waiter, _ := idem.New(st, idem.Options{Logger: quiet, Wait: 10 * time.Second, PollInterval: time.Millisecond})
	for round := range 5 {
		key := fmt.Sprintf("remote-%d", round)
		started, finish := make(chan struct{}), make(chan struct{})
		go func() {
			_, _ = holder.Do(context.Background(), key, fp1, func(context.Context) (idem.Response, error) {
				close(started)
				<-finish
				return idem.Response{Status: 201, Body: []byte(key)}, nil
			})
		}()
		<-started
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				res, err := waiter.Do(context.Background(), key, fp1, effect(new(atomic.Int32), 500, ""))
				if err != nil || !res.Replayed || string(res.Response.Body) != key {
					t.Errorf("waiter: %+v, %v", res, err)
				}
			})
		}
		time.AfterFunc(20*time.Millisecond, func() { close(finish) })
		wg.Wait()
	}
	// A waiter that gives up (its context ends) leaves nothing either.
	hold, started := make(chan struct{}), make(chan struct{})
	defer close(hold)
	go func() {
		_, _ = holder.Do(context.Background(), "held", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-hold
			return idem.Response{Status: 201}, nil
		})
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := waiter.Do(ctx, "held", fp1, effect(new(atomic.Int32), 201, "")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter that gave up: %v", err)
	}
	if n := idem.WaitingKeys(waiter); n != 0 {
		t.Fatalf("the waiters map holds %d keys after every waiter returned, want 0", n)
	}
}

// Retry-After on ErrInFlight estimates when the answer will exist: about as long as the effect
// has run so far, at least a second, never more than one heartbeat interval nor the lease left.
func TestInFlightRetryAfter(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		opt       idem.Options
		running   time.Duration // how long the effect has run when the duplicate comes
		wantAfter time.Duration
	}{
		{"just started", idem.Options{}, 100 * time.Millisecond, time.Second},
		{"ran 2.5s", idem.Options{}, 2500 * time.Millisecond, 3 * time.Second},
		{"bounded by the heartbeat", idem.Options{Lease: time.Minute}, 25 * time.Second, 20 * time.Second},
		{"bounded by the lease left", idem.Options{Lease: 30 * time.Second, Heartbeat: -1}, 26 * time.Second, 4 * time.Second},
		{"at least a second", idem.Options{Lease: 3 * time.Second, Heartbeat: -1}, 2900 * time.Millisecond, time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tc.opt)
			release, started := make(chan struct{}), make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = b.eng.Do(context.Background(), "k", fp1, func(context.Context) (idem.Response, error) {
					close(started)
					<-release
					return idem.Response{Status: 200}, nil
				})
			}()
			<-started
			b.clock.Advance(tc.running)
			var errs [32]error
			var wg sync.WaitGroup
			for i := range errs {
				wg.Go(func() { _, errs[i] = b.eng.Do(context.Background(), "k", fp1, effect(new(atomic.Int32), 200, "")) })
			}
			wg.Wait()
			close(release)
			<-done
			for _, err := range errs {
				var ife *idem.InFlightError
				if !errors.As(err, &ife) {
					t.Fatalf("err = %v, want *InFlightError", err)
				}
				if ife.RetryAfter != tc.wantAfter {
					t.Fatalf("RetryAfter = %v, want %v", ife.RetryAfter, tc.wantAfter)
				}
			}
		})
	}
}

// An effect that returned an error still ran: Executed says so.
func TestExecutedWithError(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	boom := errors.New("boom")
	for _, fn := range []idem.Func{
		func(context.Context) (idem.Response, error) { return idem.Response{}, boom },
		func(context.Context) (idem.Response, error) { return idem.Response{}, idem.Uncertain(boom) },
	} {
		res, err := b.eng.Do(context.Background(), fmt.Sprint("k", b.store.reserves.Load()), fp1, fn)
		if !errors.Is(err, boom) || !res.Executed || res.Replayed || res.Kept {
			t.Fatalf("Do = %+v, %v; want Executed with the effect's error", res, err)
		}
	}
}

// A holder whose claim was taken over, and whose effect then completed under the new holder,
// must not take that completion for its own: its result was not stored.
func TestLostLeaseNotMistakenForOwnCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{Lease: time.Second, Heartbeat: -1})
	var doErr error
	var res idem.Result
	done := make(chan struct{})
	proceed, started := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		res, doErr = b.eng.Do(context.Background(), "k", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-proceed
			return idem.Response{Status: 201, Body: []byte("old holder")}, nil
		})
	}()
	<-started
	// The old holder pauses past its lease; another takes over and completes.
	b.clock.Advance(2 * time.Second)
	other, err := idem.New(b.mem, idem.Options{Lease: time.Second, Now: b.clock.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := other.Do(context.Background(), "k", fp1, effect(new(atomic.Int32), 201, "new holder")); err != nil || !r.Takeover || !r.Kept {
		t.Fatalf("takeover: %+v, %v", r, err)
	}
	close(proceed)
	<-done
	if !errors.Is(doErr, idem.ErrLeaseLost) || res.Kept {
		t.Fatalf("old holder: %+v, %v; want ErrLeaseLost and nothing kept", res, doErr)
	}
	rec, _ := b.mem.Get(context.Background(), "k")
	if string(rec.Response.Body) != "new holder" {
		t.Fatalf("stored %q, want the new holder's response", rec.Response.Body)
	}
}

// The cache never serves a record at or past its ExpiresAt (invariant 5): the key is absent
// then, and the effect runs again.
func TestCacheHonoursExpiresAt(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{CacheSize: 100, TTL: time.Hour})
	ctx := context.Background()
	var runs atomic.Int32
	first, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 201, "first"))
	if err != nil || !first.Kept {
		t.Fatalf("first: %+v, %v", first, err)
	}
	if res, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 201, "again")); err != nil || !res.Replayed {
		t.Fatalf("replay: %+v, %v", res, err) // fills the cache
	}
	b.clock.Advance(first.ExpiresAt.Sub(b.clock.Now()) - time.Microsecond)
	before := b.store.reserves.Load()
	if res, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 201, "again")); err != nil || !res.Replayed || b.store.reserves.Load() != before {
		t.Fatalf("just before ExpiresAt: %+v, %v; want a replay from the cache", res, err)
	}
	b.clock.Advance(time.Microsecond) // now == ExpiresAt: the record counts as absent
	res, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 201, "second"))
	if err != nil || res.Replayed || !res.Executed || runs.Load() != 2 {
		t.Fatalf("at ExpiresAt: %+v, %v, runs %d; want a new execution", res, err, runs.Load())
	}
}
