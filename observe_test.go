package idem_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// recorder is an Observer that records every stage and checks that each Begin is closed by
// exactly one End with the context Begin returned.
type recorder struct {
	next atomic.Int64
	mu   sync.Mutex
	open map[int64]idem.Stage // stages begun and not ended
	done []idem.Event
	errs []string
}

type stageID struct{}

func newRecorder() *recorder { return &recorder{open: map[int64]idem.Stage{}} }

func (r *recorder) Begin(ctx context.Context, stage idem.Stage, key string) context.Context {
	id := r.next.Add(1)
	r.mu.Lock()
	r.open[id] = stage
	r.mu.Unlock()
	return context.WithValue(ctx, stageID{}, id)
}

func (r *recorder) End(ctx context.Context, ev idem.Event) {
	id, _ := ctx.Value(stageID{}).(int64)
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, ok := r.open[id]; !ok || st != ev.Stage {
		r.errs = append(r.errs, fmt.Sprintf("End(%s) with the context of stage %d (%s, open %v)", ev.Stage, id, st, ok))
	}
	delete(r.open, id)
	r.done = append(r.done, ev)
}

// take returns the events since the last take as "stage:outcome" words, and checks that no
// stage is left open.
func (r *recorder) take(t *testing.T) []string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 || len(r.open) > 0 {
		t.Fatalf("observer misuse: %v; open: %v", r.errs, r.open)
	}
	var out []string
	for _, ev := range r.done {
		out = append(out, ev.Stage.String()+":"+string(ev.Outcome))
	}
	r.done = nil
	return out
}

func (r *recorder) last(stage idem.Stage) idem.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range slices.Backward(r.done) {
		if ev.Stage == stage {
			return ev
		}
	}
	return idem.Event{}
}

func TestObserverStages(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	b := setup(t, idem.Options{Observer: rec, CacheSize: 8, Lease: time.Minute})
	ctx := context.Background()
	var runs atomic.Int32
	want := func(t *testing.T, want ...string) {
		t.Helper()
		if got := rec.take(t); !slices.Equal(got, want) {
			t.Errorf("stages = %v, want %v", got, want)
		}
	}

	// New key: claim, effect, complete, in the order they end.
	var seen context.Context
	_, err := b.eng.Do(ctx, "k", fp1, func(ctx context.Context) (idem.Response, error) {
		seen = ctx
		return idem.Response{Status: 201}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	claim := rec.last(idem.StageClaim)
	want(t, "claim:new", "complete:ok", "effect:kept")
	if claim.Attempt != 1 || claim.Lease != time.Minute || claim.Takeover || claim.Key != "k" {
		t.Errorf("claim event = %+v", claim)
	}
	if _, ok := seen.Value(stageID{}).(int64); !ok {
		t.Error("the effect does not run under the context the observer returned")
	}

	// Replay from the store, then from the cache.
	b.eng.Do(ctx, "k", fp1, effect(&runs, 200, ""))
	want(t, "claim:replay")
	b.eng.Do(ctx, "k", fp1, effect(&runs, 200, ""))
	if !rec.last(idem.StageClaim).Cached {
		t.Error("a cached replay is not marked Cached")
	}
	want(t, "claim:replay")

	// Another payload.
	if _, err := b.eng.Do(ctx, "k", fp2, effect(&runs, 200, "")); !errors.Is(err, idem.ErrMismatch) {
		t.Fatal(err)
	}
	want(t, "claim:mismatch")

	// An error releases; a 5xx too.
	b.eng.Do(ctx, "e", fp1, func(context.Context) (idem.Response, error) { return idem.Response{}, errors.New("boom") })
	want(t, "claim:new", "release:ok", "effect:released")

	// Uncertain.
	b.eng.Do(ctx, "u", fp1, func(context.Context) (idem.Response, error) { return idem.Response{}, idem.Uncertain(nil) })
	want(t, "claim:new", "effect:uncertain")

	// Panic: released, then re-panicked.
	func() {
		defer func() { _ = recover() }()
		b.eng.Do(ctx, "p", fp1, func(context.Context) (idem.Response, error) { panic("boom") })
	}()
	want(t, "claim:new", "release:ok", "effect:panic")

	// In flight, failing fast.
	started, release := make(chan struct{}), make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		b.eng.Do(ctx, "f", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-release
			return idem.Response{Status: 200}, nil
		})
	}()
	<-started
	if _, err := b.eng.Do(ctx, "f", fp1, effect(&runs, 200, "")); !errors.Is(err, idem.ErrInFlight) {
		t.Fatal(err)
	}
	if got := rec.last(idem.StageClaim); got.Outcome != idem.OutcomeInFlight {
		t.Errorf("duplicate's claim = %+v", got)
	}
	close(release)
	<-finished
	rec.take(t)

	// The store down: the claim ends in a store error; nothing else happens.
	b.store.fail.Store(true)
	b.eng.Do(ctx, "down", fp1, effect(&runs, 200, ""))
	b.store.fail.Store(false)
	want(t, "claim:store_error")
}

func (r *recorder) waiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range r.open {
		if st == idem.StageWait {
			return true
		}
	}
	return false
}

func TestObserverWaitAndTakeover(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	b := setup(t, idem.Options{Observer: rec, Lease: time.Minute, Heartbeat: -1, Wait: time.Minute})
	ctx := context.Background()
	var runs atomic.Int32

	// A duplicate waits for the holder, then replays.
	started, release, finished := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		_, err := b.eng.Do(ctx, "w", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-release
			return idem.Response{Status: 200}, nil
		})
		finished <- err
	}()
	<-started
	dup := make(chan error)
	go func() {
		res, err := b.eng.Do(ctx, "w", fp1, effect(&runs, 200, ""))
		if err == nil && !res.Replayed {
			err = errors.New("duplicate not replayed")
		}
		dup <- err
	}()
	for !rec.waiting() {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := cmp2(<-finished, <-dup); err != nil {
		t.Fatal(err)
	}
	got := rec.take(t)
	slices.Sort(got)
	if want := []string{"claim:new", "claim:replay", "complete:ok", "effect:kept", "wait:replay"}; !slices.Equal(got, want) {
		t.Errorf("stages = %v, want %v", got, want)
	}

	// A holder past its lease is taken over; its own result is then refused.
	started, release = make(chan struct{}), make(chan struct{})
	go func() {
		_, err := b.eng.Do(ctx, "t", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-release
			return idem.Response{Status: 200}, nil
		})
		finished <- err
	}()
	<-started
	b.clock.Advance(2 * time.Minute)
	if _, err := b.eng.Do(ctx, "t", fp1, effect(&runs, 200, "")); err != nil {
		t.Fatal(err)
	}
	if c := rec.last(idem.StageClaim); !c.Takeover || c.Attempt != 2 || c.Outcome != idem.OutcomeNew {
		t.Errorf("takeover claim = %+v", c)
	}
	if e := rec.last(idem.StageEffect); !e.Takeover || e.Attempt != 2 || e.Outcome != idem.OutcomeKept {
		t.Errorf("takeover effect = %+v", e)
	}
	close(release)
	if err := <-finished; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("old holder: %v", err)
	}
	if e := rec.last(idem.StageEffect); e.Outcome != idem.OutcomeLeaseLost || !errors.Is(e.Err, idem.ErrLeaseLost) {
		t.Errorf("old holder's effect = %+v", e)
	}
	if c := rec.last(idem.StageComplete); c.Outcome != idem.OutcomeLeaseLost {
		t.Errorf("old holder's complete = %+v", c)
	}
	rec.take(t)
}

func cmp2(a, b error) error { return errors.Join(a, b) }

// TestObserverConcurrent: many goroutines on few keys; every stage begun is ended once, with
// its own context, and every Do ends exactly one claim.
func TestObserverConcurrent(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	b := setup(t, idem.Options{Observer: rec, Wait: 5 * time.Second, PollInterval: time.Millisecond, CacheSize: 4})
	const workers, each = 8, 100
	var wg sync.WaitGroup
	var runs atomic.Int32
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				fp := fp1
				if (w+i)%7 == 0 {
					fp = fp2
				}
				b.eng.Do(context.Background(), fmt.Sprint("k", i%10), fp, effect(&runs, 200, "x"))
			}
		})
	}
	wg.Wait()
	claims, effects := 0, 0
	for _, s := range rec.take(t) {
		switch {
		case strings.HasPrefix(s, "claim:"):
			claims++
		case s == "effect:kept":
			effects++
		}
	}
	if claims != workers*each || effects != int(runs.Load()) {
		t.Errorf("claims %d (want %d), kept effects %d (want %d runs)", claims, workers*each, effects, runs.Load())
	}
}
