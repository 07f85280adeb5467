package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/storehook"
	"github.com/idemkit/idem/store/memstore"
)

// clock is a fake clock safe for concurrent use.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// countingStore counts calls and can be made to fail.
type countingStore struct {
	idem.Store
	reserves, completes, releases, extends atomic.Int32
	fail                                   atomic.Bool
}

var errDown = errors.New("store is down")

func newCountingStore(st idem.Store) *countingStore {
	s := new(countingStore)
	counts := map[storehook.Op]*atomic.Int32{storehook.Reserve: &s.reserves, storehook.Complete: &s.completes,
		storehook.Release: &s.releases, storehook.Extend: &s.extends}
	s.Store = storehook.Wrap(st, storehook.Hooks{Before: func(_ context.Context, op storehook.Op) error {
		if n := counts[op]; n != nil {
			n.Add(1)
			if s.fail.Load() {
				return errDown
			}
		}
		return nil
	}})
	return s
}

type bundle struct {
	mem   *memstore.Store
	store *countingStore
	clock *clock
	eng   *idem.Engine
}

func setup(t *testing.T, opt idem.Options) *bundle {
	t.Helper()
	b := &bundle{mem: memstore.New(), clock: newClock()}
	b.store = newCountingStore(b.mem)
	if opt.Now == nil {
		opt.Now = b.clock.Now
	}
	if opt.Logger == nil {
		opt.Logger = quiet
	}
	eng, err := idem.New(b.store, opt)
	if err != nil {
		t.Fatal(err)
	}
	b.eng = eng
	return b
}

var quiet = slog.New(slog.DiscardHandler)

var fp1, fp2 = idem.Fingerprint([]byte("one")), idem.Fingerprint([]byte("two"))

// effect returns a Func that counts its runs and answers status with body.
func effect(n *atomic.Int32, status int, body string) idem.Func {
	return func(context.Context) (idem.Response, error) {
		n.Add(1)
		return idem.Response{Status: status, Header: map[string][]string{"X-Run": {"1"}}, Body: []byte(body)}, nil
	}
}

func TestDoExecutesOnceThenReplays(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	var runs atomic.Int32
	ctx := context.Background()
	first, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 201, "charged"))
	if err != nil || first.Replayed || !first.Kept || !first.Executed || first.Response.Status != 201 {
		t.Fatalf("first: %+v, %v", first, err)
	}
	if want := b.clock.Now().Add(24 * time.Hour); !first.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", first.ExpiresAt, want)
	}
	for range 3 {
		again, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 500, "second run"))
		if err != nil || !again.Replayed || !again.Response.Equal(first.Response) {
			t.Fatalf("replay: %+v, %v", again, err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("effect ran %d times, want 1", runs.Load())
	}
	// Another fingerprint with the same key: mismatch, no effect.
	_, err = b.eng.Do(ctx, "k", fp2, effect(&runs, 200, "other"))
	if !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("other fingerprint: %v, want ErrMismatch", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("effect ran %d times after mismatch, want 1", runs.Load())
	}
}

func TestDoConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	for _, wait := range []time.Duration{0, 5 * time.Second} {
		t.Run(fmt.Sprintf("wait=%s", wait), func(t *testing.T) {
			t.Parallel()
			b := setup(t, idem.Options{Wait: wait, PollInterval: time.Millisecond, Now: time.Now})
			for round := range 20 {
				key := fmt.Sprintf("k%d", round)
				var runs atomic.Int32
				release := make(chan struct{})
				fn := func(context.Context) (idem.Response, error) {
					runs.Add(1)
					<-release
					return idem.Response{Status: 200, Body: []byte(key)}, nil
				}
				const n = 200
				var wg sync.WaitGroup
				var executed, replayed, inflight atomic.Int32
				time.AfterFunc(20*time.Millisecond, func() { close(release) })
				for range n {
					wg.Go(func() {
						res, err := b.eng.Do(context.Background(), key, fp1, fn)
						switch {
						case errors.Is(err, idem.ErrInFlight):
							inflight.Add(1)
						case err != nil:
							t.Errorf("Do: %v", err)
						case string(res.Response.Body) != key:
							t.Errorf("body %q", res.Response.Body)
						case res.Replayed:
							replayed.Add(1)
						default:
							executed.Add(1)
						}
					})
				}
				wg.Wait()
				if runs.Load() != 1 || executed.Load() != 1 {
					t.Fatalf("round %d: runs=%d executed=%d, want 1", round, runs.Load(), executed.Load())
				}
				if wait > 0 && inflight.Load() != 0 {
					t.Fatalf("round %d: %d in-flight errors while waiting was on", round, inflight.Load())
				}
				if executed.Load()+replayed.Load()+inflight.Load() != n {
					t.Fatalf("round %d: outcomes do not add up", round)
				}
			}
		})
	}
}

// Two engines over one store stand for two processes: the waiter learns of the result by
// polling the store.
func TestWaitAcrossProcesses(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	a, _ := idem.New(st, idem.Options{})
	bEng, _ := idem.New(st, idem.Options{Wait: 5 * time.Second, PollInterval: 5 * time.Millisecond})
	started, finish := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	go func() {
		_, _ = a.Do(context.Background(), "x", fp1, func(context.Context) (idem.Response, error) {
			runs.Add(1)
			close(started)
			<-finish
			return idem.Response{Status: 200, Body: []byte("from a")}, nil
		})
	}()
	<-started
	time.AfterFunc(50*time.Millisecond, func() { close(finish) })
	res, err := bEng.Do(context.Background(), "x", fp1, effect(&runs, 200, "from b"))
	if err != nil || !res.Replayed || string(res.Response.Body) != "from a" {
		t.Fatalf("waiter: %+v, %v", res, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("runs = %d", runs.Load())
	}
}

func TestWaitGivesUpWithInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{Wait: 30 * time.Millisecond, Now: time.Now})
	hold := make(chan struct{})
	defer close(hold)
	started := make(chan struct{})
	go func() {
		_, _ = b.eng.Do(context.Background(), "slow", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-hold
			return idem.Response{Status: 200}, nil
		})
	}()
	<-started
	begin := time.Now()
	_, err := b.eng.Do(context.Background(), "slow", fp1, effect(new(atomic.Int32), 200, ""))
	var ife *idem.InFlightError
	if !errors.As(err, &ife) || !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("err = %v, want *InFlightError", err)
	}
	if ife.RetryAfter < time.Second {
		t.Errorf("RetryAfter = %v", ife.RetryAfter)
	}
	if d := time.Since(begin); d < 30*time.Millisecond || d > 2*time.Second {
		t.Errorf("waited %v, want about 30ms", d)
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		policy idem.Policy
		kept   bool
	}{
		{200, nil, true}, {201, nil, true}, {400, nil, true}, {404, nil, true}, {422, nil, true},
		{401, nil, false}, {403, nil, false}, {408, nil, false}, {409, nil, false},
		{425, nil, false}, {429, nil, false}, {500, nil, false}, {503, nil, false},
		{500, idem.StoreServerErrors, true}, {502, idem.StoreServerErrors, true}, {429, idem.StoreServerErrors, false},
	}
	for _, tc := range cases {
		b := setup(t, idem.Options{Policy: tc.policy})
		var runs atomic.Int32
		res, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, tc.status, "x"))
		if err != nil || res.Kept != tc.kept || res.Response.Status != tc.status {
			t.Fatalf("status %d: %+v, %v; want kept=%v", tc.status, res, err, tc.kept)
		}
		again, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, tc.status, "x"))
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int32{true: 1, false: 2}[tc.kept]; runs.Load() != want || again.Replayed != tc.kept {
			t.Errorf("status %d: runs=%d replayed=%v, want runs=%d", tc.status, runs.Load(), again.Replayed, want)
		}
	}
}

func TestErrorReleasesClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	boom := errors.New("boom")
	_, err := b.eng.Do(context.Background(), "k", fp1, func(context.Context) (idem.Response, error) {
		return idem.Response{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the effect's error", err)
	}
	var runs atomic.Int32
	res, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, 200, "ok"))
	if err != nil || res.Replayed || runs.Load() != 1 {
		t.Fatalf("retry after error: %+v, %v, runs=%d", res, err, runs.Load())
	}
}

func TestPanicReleasesAndRepanics(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the effect's panic", r)
			}
		}()
		_, _ = b.eng.Do(context.Background(), "k", fp1, func(context.Context) (idem.Response, error) { panic("kaboom") })
		t.Fatal("Do returned after a panic")
	}()
	var runs atomic.Int32
	if res, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, 200, "")); err != nil || res.Replayed || runs.Load() != 1 {
		t.Fatalf("after panic: %+v, %v", res, err)
	}
}

func TestUncertain(t *testing.T) {
	t.Parallel()
	timeout := errors.New("upstream timeout after send")
	uncertain := func(context.Context) (idem.Response, error) { return idem.Response{}, idem.Uncertain(timeout) }
	t.Run("expire", func(t *testing.T) {
		b := setup(t, idem.Options{Lease: 10 * time.Second})
		_, err := b.eng.Do(context.Background(), "k", fp1, uncertain)
		if !errors.Is(err, idem.ErrUncertain) || !errors.Is(err, timeout) {
			t.Fatalf("err = %v", err)
		}
		var runs atomic.Int32
		if _, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, 200, "")); !errors.Is(err, idem.ErrInFlight) {
			t.Fatalf("retry within lease: %v, want ErrInFlight", err)
		}
		b.clock.Advance(11 * time.Second)
		res, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, 200, ""))
		if err != nil || !res.Takeover || runs.Load() != 1 {
			t.Fatalf("after lease: %+v, %v", res, err)
		}
	})
	t.Run("release", func(t *testing.T) {
		b := setup(t, idem.Options{Uncertain: idem.UncertainRelease})
		_, _ = b.eng.Do(context.Background(), "k", fp1, uncertain)
		var runs atomic.Int32
		if res, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, 200, "")); err != nil || res.Takeover {
			t.Fatalf("retry: %+v, %v", res, err)
		}
	})
	t.Run("pin", func(t *testing.T) {
		b := setup(t, idem.Options{Uncertain: idem.UncertainHold, Lease: 10 * time.Second, TTL: time.Hour})
		_, _ = b.eng.Do(context.Background(), "k", fp1, uncertain)
		b.clock.Advance(30 * time.Minute)
		var runs atomic.Int32
		if _, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, 200, "")); !errors.Is(err, idem.ErrInFlight) {
			t.Fatalf("pinned key after lease: %v, want ErrInFlight", err)
		}
		b.clock.Advance(31 * time.Minute)
		if _, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, 200, "")); err != nil || runs.Load() != 1 {
			t.Fatalf("after the window: %v runs=%d", err, runs.Load())
		}
	})
	t.Run("policy hold without error", func(t *testing.T) {
		b := setup(t, idem.Options{Policy: func(idem.Response, error) idem.Disposition { return idem.Hold }})
		_, err := b.eng.Do(context.Background(), "k", fp1, effect(new(atomic.Int32), 200, ""))
		if !errors.Is(err, idem.ErrUncertain) {
			t.Fatalf("err = %v, want ErrUncertain", err)
		}
	})
}

func TestHeartbeatKeepsLongWork(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	a, _ := idem.New(st, idem.Options{Lease: 150 * time.Millisecond, Heartbeat: 30 * time.Millisecond})
	other, _ := idem.New(st, idem.Options{Lease: 150 * time.Millisecond})
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := a.Do(context.Background(), "long", fp1, func(ctx context.Context) (idem.Response, error) {
			close(started)
			select {
			case <-finish: // the work lasts until the other process has tried 8 times
			case <-ctx.Done():
				return idem.Response{}, context.Cause(ctx)
			}
			return idem.Response{Status: 200}, nil
		})
		done <- err
	}()
	<-started
	for range 8 {
		time.Sleep(50 * time.Millisecond)
		var runs atomic.Int32
		if _, err := other.Do(context.Background(), "long", fp1, effect(&runs, 200, "")); !errors.Is(err, idem.ErrInFlight) {
			close(finish)
			t.Fatalf("long work was taken over: %v (runs %d)", err, runs.Load())
		}
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestLeaseLostCancelsEffect(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{Lease: time.Second, Heartbeat: 10 * time.Millisecond})
	started := make(chan struct{})
	var cause error
	var doErr error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		_, doErr = b.eng.Do(context.Background(), "k", fp1, func(ctx context.Context) (idem.Response, error) {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return idem.Response{Status: 200}, nil
		})
	}()
	<-started
	// Another holder takes over after the lease (on the fake clock).
	res, err := b.mem.Reserve(context.Background(), idem.ReserveRequest{Key: "k", Fingerprint: fp1, Now: b.clock.Now().Add(2 * time.Second), Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("takeover: %+v %v", res, err)
	}
	<-finished
	if !errors.Is(cause, idem.ErrLeaseLost) {
		t.Errorf("effect's context cause = %v, want ErrLeaseLost", cause)
	}
	if !errors.Is(doErr, idem.ErrLeaseLost) {
		t.Errorf("Do = %v, want ErrLeaseLost", doErr)
	}
	rec, _ := b.mem.Get(context.Background(), "k")
	if rec.Token != res.Record.Token || rec.State != idem.StateInProgress {
		t.Errorf("the new holder's claim was disturbed: %+v", rec)
	}
}

func TestStoreDownFailsClosed(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	b.store.fail.Store(true)
	var runs atomic.Int32
	_, err := b.eng.Do(context.Background(), "k", fp1, effect(&runs, 200, ""))
	var se *idem.StoreError
	if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.As(err, &se) || !errors.Is(err, errDown) || se.Op != "reserve" {
		t.Fatalf("err = %v, want a reserve StoreError wrapping the store's error", err)
	}
	if runs.Load() != 0 {
		t.Fatal("effect ran with the store down")
	}
}

func TestCompleteFailureIsReported(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{StoreTimeout: 50 * time.Millisecond})
	res, err := b.eng.Do(context.Background(), "k", fp1, func(context.Context) (idem.Response, error) {
		b.store.fail.Store(true)
		return idem.Response{Status: 201, Body: []byte("done")}, nil
	})
	if !errors.Is(err, idem.ErrStoreUnavailable) || string(res.Response.Body) != "done" || res.Kept || !res.Executed {
		t.Fatalf("Do = %+v, %v; want the response with a store error", res, err)
	}
	if b.store.completes.Load() < 2 {
		t.Errorf("Complete tried %d times, want retries", b.store.completes.Load())
	}
	b.store.fail.Store(false)
	// The record stays in flight: a retry must not execute.
	if _, err := b.eng.Do(context.Background(), "k", fp1, effect(new(atomic.Int32), 200, "")); !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("retry: %v, want ErrInFlight", err)
	}
}

func TestCallerCancelDoesNotLoseResult(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	_, err := b.eng.Do(ctx, "k", fp1, func(context.Context) (idem.Response, error) {
		cancel() // the client gives up after the effect happened
		return idem.Response{Status: 200, Body: []byte("paid")}, nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	res, err := b.eng.Do(context.Background(), "k", fp1, effect(new(atomic.Int32), 200, "again"))
	if err != nil || !res.Replayed || string(res.Response.Body) != "paid" {
		t.Fatalf("retry: %+v, %v", res, err)
	}
}

func TestExpiredRecordExecutesAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{TTL: time.Hour})
	var runs atomic.Int32
	_, _ = b.eng.Do(context.Background(), "k", fp1, effect(&runs, 200, ""))
	b.clock.Advance(time.Hour - time.Microsecond)
	if res, _ := b.eng.Do(context.Background(), "k", fp1, effect(&runs, 200, "")); !res.Replayed {
		t.Fatal("not replayed within the window")
	}
	b.clock.Advance(time.Microsecond)
	if res, err := b.eng.Do(context.Background(), "k", fp2, effect(&runs, 200, "")); err != nil || res.Replayed || runs.Load() != 2 {
		t.Fatalf("after expiry: %+v %v runs=%d", res, err, runs.Load())
	}
}

func TestCache(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{CacheSize: 2, TTL: time.Hour})
	var runs atomic.Int32
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		if _, err := b.eng.Do(ctx, k, fp1, effect(&runs, 200, k)); err != nil {
			t.Fatal(err)
		}
		// The first replay reads the store and fills the cache.
		before := b.store.reserves.Load()
		if res, err := b.eng.Do(ctx, k, fp1, effect(&runs, 200, k)); err != nil || !res.Replayed || b.store.reserves.Load() != before+1 {
			t.Fatalf("first replay: %+v %v", res, err)
		}
	}
	before := b.store.reserves.Load()
	for range 5 {
		res, err := b.eng.Do(ctx, "a", fp1, effect(&runs, 200, "x"))
		if err != nil || !res.Replayed || string(res.Response.Body) != "a" {
			t.Fatalf("cached replay: %+v %v", res, err)
		}
	}
	if _, err := b.eng.Do(ctx, "a", fp2, effect(&runs, 200, "x")); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("cached mismatch: %v", err)
	}
	if got := b.store.reserves.Load(); got != before {
		t.Fatalf("cached replays reached the store %d times", got-before)
	}
	// A third key evicts the least recently used ("b"), which then comes from the store.
	_, _ = b.eng.Do(ctx, "c", fp1, effect(&runs, 200, "c"))
	_, _ = b.eng.Do(ctx, "c", fp1, effect(&runs, 200, "c"))
	before = b.store.reserves.Load()
	if res, _ := b.eng.Do(ctx, "b", fp1, effect(&runs, 200, "x")); !res.Replayed || b.store.reserves.Load() != before+1 {
		t.Fatalf("evicted key: replayed=%v store calls=%d", res.Replayed, b.store.reserves.Load()-before)
	}
	// Expired entries are not served.
	b.clock.Advance(time.Hour)
	if res, _ := b.eng.Do(ctx, "a", fp1, effect(&runs, 200, "new")); res.Replayed {
		t.Fatal("served an expired record from the cache")
	}
	// A record too large for the byte budget is not cached.
	big := setup(t, idem.Options{CacheSize: 10, CacheBytes: 8 << 10})
	_, _ = big.eng.Do(ctx, "big", fp1, effect(&runs, 200, strings.Repeat("x", 2<<10)))
	_, _ = big.eng.Do(ctx, "big", fp1, effect(&runs, 200, ""))
	before = big.store.reserves.Load()
	if res, _ := big.eng.Do(ctx, "big", fp1, effect(&runs, 200, "")); !res.Replayed || big.store.reserves.Load() != before+1 {
		t.Fatalf("oversized record served from the cache")
	}
	// In-progress records are never cached.
	hold := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_, _ = b.eng.Do(ctx, "p", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-hold
			return idem.Response{Status: 200}, nil
		})
	}()
	<-started
	before = b.store.reserves.Load()
	_, err := b.eng.Do(ctx, "p", fp1, effect(&runs, 200, ""))
	close(hold)
	if !errors.Is(err, idem.ErrInFlight) || b.store.reserves.Load() != before+1 {
		t.Fatalf("in-progress key: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	fn := effect(new(atomic.Int32), 200, "")
	cases := []struct {
		name, key, fp string
		fn            idem.Func
	}{
		{"empty key", "", fp1, fn},
		{"key too long", strings.Repeat("k", idem.MaxStorageKeyLen+1), fp1, fn},
		{"invalid utf-8", "k\xff", fp1, fn},
		{"NUL in key", "k\x00", fp1, fn},
		{"empty fingerprint", "k", "", fn},
		{"short fingerprint", "k", fp1[:63], fn},
		{"upper-case fingerprint", "k", strings.ToUpper(fp1), fn},
		{"non-hex fingerprint", "k", strings.Repeat("g", 64), fn},
		{"nil fn", "k", fp1, nil},
	}
	for _, tc := range cases {
		_, err := b.eng.Do(context.Background(), tc.key, tc.fp, tc.fn)
		if !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%s: err = %v, want ErrInvalidInput", tc.name, err)
		}
	}
	if b.mem.Len() != 0 || b.store.reserves.Load() != 0 {
		t.Fatalf("bad input reached the store")
	}
	// The longest key is fine.
	if _, err := b.eng.Do(context.Background(), strings.Repeat("k", idem.MaxStorageKeyLen), fp1, fn); err != nil {
		t.Fatal(err)
	}
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	bad := map[string]idem.Options{
		"Options.Lease":        {Lease: time.Microsecond},
		"Options.TTL":          {Lease: time.Hour, TTL: time.Minute},
		"Options.Heartbeat":    {Lease: time.Second, Heartbeat: 2 * time.Second},
		"Options.Wait":         {Wait: -1},
		"Options.CacheSize":    {CacheSize: -1},
		"Options.Uncertain":    {Uncertain: 9},
		"Options.StoreTimeout": {StoreTimeout: -1},
	}
	for field, opt := range bad {
		_, err := idem.New(st, opt)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v, want ErrInvalidInput naming the field", field, err)
		}
	}
	if _, err := idem.New(nil, idem.Options{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("nil store: %v", err)
	}
	e, err := idem.New(st, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := e.Options()
	if o.Lease != 30*time.Second || o.TTL != 24*time.Hour || o.Heartbeat != 10*time.Second || o.Wait != 0 {
		t.Errorf("defaults: %+v", o)
	}
}

func TestContextCancelledBeforeClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var runs atomic.Int32
	if _, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 200, "")); !errors.Is(err, context.Canceled) || runs.Load() != 0 {
		t.Fatalf("err = %v runs = %d", err, runs.Load())
	}
}

// lostAnswerStore completes, then reports the lease lost, as a network store does when a
// Complete lands but its answer is lost and the retried call is refused.
type lostAnswerStore struct{ *memstore.Store }

func (s lostAnswerStore) Complete(ctx context.Context, key string, token int64, r idem.Response, now, exp time.Time) error {
	if err := s.Store.Complete(ctx, key, token, r, now, exp); err != nil {
		return err
	}
	return idem.ErrLeaseLost
}

func TestCompleteWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	eng, _ := idem.New(lostAnswerStore{memstore.New()}, idem.Options{Logger: quiet})
	res, err := eng.Do(context.Background(), "k", fp1, effect(new(atomic.Int32), 201, "ok"))
	if err != nil || !res.Kept {
		t.Fatalf("Do = %+v, %v; want the completion recognised", res, err)
	}
}

// leavingStore is a lostAnswerStore whose caller goes away while the answer is lost, and
// whose Get, like a network store's, fails on a context that has ended.
type leavingStore struct {
	lostAnswerStore
	leave context.CancelFunc
}

func (s leavingStore) Complete(ctx context.Context, key string, token int64, r idem.Response, now, exp time.Time) error {
	err := s.lostAnswerStore.Complete(ctx, key, token, r, now, exp)
	s.leave()
	return err
}

func (s leavingStore) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, err
	}
	return s.lostAnswerStore.Get(ctx, key)
}

// TestCompleteWhoseAnswerWasLostAsTheCallerLeft: the record is read back detached from the
// caller's context, so a completion that landed is recognised even when the caller left
// while its answer was lost, and the effect is not reported as unrecorded.
func TestCompleteWhoseAnswerWasLostAsTheCallerLeft(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := leavingStore{lostAnswerStore{memstore.New()}, cancel}
	eng, _ := idem.New(st, idem.Options{Logger: quiet})
	res, err := eng.Do(ctx, "k", fp1, effect(new(atomic.Int32), 201, "ok"))
	if err != nil || !res.Kept {
		t.Fatalf("Do = %+v, %v; want the completion recognised", res, err)
	}
	if rec, err := st.Store.Get(context.Background(), "k"); err != nil || rec.State != idem.StateCompleted {
		t.Fatalf("record = %+v, %v; want it completed", rec, err)
	}
}

func TestCacheBoundedByBytes(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{CacheSize: 100, CacheBytes: 16 << 10})
	ctx := context.Background()
	var runs atomic.Int32
	for i := range 20 { // ~1.1 KiB each: 22 KiB over a 16 KiB budget
		k := fmt.Sprintf("k%d", i)
		_, _ = b.eng.Do(ctx, k, fp1, effect(&runs, 200, strings.Repeat("x", 900)))
		_, _ = b.eng.Do(ctx, k, fp1, effect(&runs, 200, "")) // replayed from the store, then cached
	}
	before := b.store.reserves.Load()
	_, _ = b.eng.Do(ctx, "k19", fp1, effect(&runs, 200, ""))
	if b.store.reserves.Load() != before {
		t.Fatal("the most recent record is not cached")
	}
	_, _ = b.eng.Do(ctx, "k0", fp1, effect(&runs, 200, ""))
	if b.store.reserves.Load() != before+1 {
		t.Fatal("the oldest record was not evicted to keep within CacheBytes")
	}
}

// extendSpy records Extend calls that do not belong to a claim running now.
type extendSpy struct {
	idem.Store
	mu      sync.Mutex
	active  map[string]int64 // key → token of the execution running now
	extends int
	wrong   []string
}

// Reserve marks a claim active from the moment it is made: the heartbeat may fire before the
// effect does anything.
func (s *extendSpy) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	res, err := s.Store.Reserve(ctx, req)
	if err == nil && res.Claimed {
		s.mu.Lock()
		s.active[req.Key] = res.Record.Token
		s.mu.Unlock()
	}
	return res, err
}

func (s *extendSpy) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	s.mu.Lock()
	s.extends++
	if tok, ok := s.active[key]; !ok || tok != token {
		s.wrong = append(s.wrong, fmt.Sprintf("Extend(%s, %d) with active token %d (%t)", key, token, tok, ok))
	}
	s.mu.Unlock()
	return s.Store.Extend(ctx, key, token, until)
}

// Heartbeat timers are reused from one execution to the next: an extension must only ever
// reach the claim running now, with its own token, never a finished one.
func TestHeartbeatsReusedSafely(t *testing.T) {
	t.Parallel()
	spy := &extendSpy{Store: memstore.New(), active: map[string]int64{}}
	eng, err := idem.New(spy, idem.Options{Lease: 60 * time.Millisecond, Heartbeat: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				key := fmt.Sprintf("g%d-%d", g, i)
				_, err := eng.Do(context.Background(), key, fp1, func(ctx context.Context) (idem.Response, error) {
					time.Sleep(time.Duration(i%4) * 4 * time.Millisecond)
					return idem.Response{Status: 200}, nil
				})
				spy.mu.Lock()
				delete(spy.active, key) // Do returns only after its heartbeat stopped
				spy.mu.Unlock()
				if err != nil {
					t.Errorf("Do(%s): %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(spy.wrong) > 0 {
		t.Fatalf("%d stray extensions, first: %s", len(spy.wrong), spy.wrong[0])
	}
	if spy.extends == 0 {
		t.Fatal("no heartbeat ran: the test proves nothing")
	}
	t.Logf("%d extensions, all to the running claim", spy.extends)
}
