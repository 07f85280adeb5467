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
		b := setup(t, idem.Options{Policy: func(idem.Response, error) idem.Disposition { return idem.DispositionUncertain }})
		_, err := b.eng.Do(context.Background(), "k", fp1, effect(new(atomic.Int32), 200, ""))
		if !errors.Is(err, idem.ErrUncertain) {
			t.Fatalf("err = %v, want ErrUncertain", err)
		}
	})
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

// TestZeroEngineSaysCreateItWithNew: an Engine not created with New says so when used.
func TestZeroEngineSaysCreateItWithNew(t *testing.T) {
	for name, e := range map[string]*idem.Engine{"zero": new(idem.Engine), "nil": nil} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "create it with New") {
					t.Errorf("%s Engine: panic %v, want one that says to create it with New", name, r)
				}
			}()
			_, _ = e.Do(context.Background(), "k", idem.Fingerprint(nil), func(context.Context) (idem.Response, error) { return idem.Response{}, nil })
		}()
	}
}
