package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/syncbuf"
	"github.com/idemkit/idem/store/memstore"
)

// TestDrainerTableUnderLoad: many requests at once, spread over every shard of the drainer's
// table, some sending their upstream call before Drain and some while it runs: once Drain has
// returned and every call is out, every claimed call has its floor; the claim clock counts
// every effect under way and no other; Abort counts the calls out and waits until the last
// handler has returned (not until its context ends); then the table is empty and so are the
// floors.
func TestDrainerTableUnderLoad(t *testing.T) {
	t.Parallel()
	for round := range 5 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			t.Parallel()
			drainerTableRound(t, 40*callShards)
		})
	}
}

func drainerTableRound(t *testing.T, n int) {
	d := newDrainer(idem.UncertainExpire, time.Minute, memstore.New(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	clock := newClaimClock(time.Hour, d)
	start := time.Now()
	var began, ended sync.WaitGroup
	began.Add(n)
	ended.Add(n)
	half := make(chan struct{})
	release := make(chan struct{})
	for i := range n {
		go func() {
			defer ended.Done()
			o := &upstreamOutcome{claimed: i%4 != 0, key: fmt.Sprintf("key-%d", i), token: int64(i + 1), expires: start.Add(time.Hour)}
			ctx := context.WithValue(context.Background(), outcomeKey{}, o)
			if i%4 == 3 {
				o.claimed = false // a pass-through: no effect, only the upstream call
			} else {
				ctx = clock.begin(ctx)
			}
			if i >= n/2 {
				<-half // sent while the drain runs
			}
			d.begin(o, start.Add(time.Minute))
			began.Done()
			<-release
			clock.end(ctx)
			d.end(o)
		}()
	}
	// Wait for the first half to be out, then drain while the second half sends.
	for d.out.Load() < int64(n/2) {
		time.Sleep(time.Millisecond)
	}
	close(half)
	d.drain()
	began.Wait()

	claimed := 0
	for i := range n {
		if i%4 == 1 || i%4 == 2 {
			claimed++
		}
	}
	d.mu.Lock()
	floors := len(d.floors)
	for i := range n {
		if _, ok := d.floors[fmt.Sprintf("key-%d", i)]; ok != (i%4 == 1 || i%4 == 2) {
			t.Errorf("key-%d (claimed %v): floor %v", i, i%4 == 1 || i%4 == 2, ok)
			break
		}
	}
	d.mu.Unlock()
	if floors != claimed {
		t.Errorf("%d floors after the drain, want one for each of the %d claimed calls out", floors, claimed)
	}
	effects := n - n/4 // every request but the pass-throughs
	if got := d.effectsBefore(time.Now().Add(time.Second)); got != effects {
		t.Errorf("%d effects under way, want %d", got, effects)
	}
	if got := d.effectsBefore(start.Add(-time.Second)); got != 0 {
		t.Errorf("%d effects began before the test, want 0", got)
	}
	if v := clock.overdue(); v != 0 {
		t.Errorf("idem_claims_overdue %v with a bound of an hour, want 0", v)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	aborted := make(chan int, 1)
	go func() { aborted <- d.abort(ctx) }()
	for !d.cut.Load() {
		time.Sleep(time.Millisecond)
	}
	select {
	case got := <-aborted:
		t.Fatalf("Abort returned %d while every call was still out", got)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	ended.Wait()
	select {
	case got := <-aborted:
		if got != n {
			t.Errorf("Abort counted %d calls out, want %d", got, n)
		}
		if ctx.Err() != nil {
			t.Errorf("Abort returned when its context ended, not when the last handler returned")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Abort did not return after every handler returned")
	}
	if got := d.effectsBefore(time.Now().Add(time.Hour)); got != 0 {
		t.Errorf("%d effects under way after every request ended", got)
	}
	if got := d.out.Load(); got != 0 {
		t.Errorf("%d calls out after every request ended", got)
	}
	for i := range d.calls {
		if d.calls[i].head != nil {
			t.Errorf("shard %d still lists a request after every request ended", i)
		}
	}
	d.mu.Lock()
	if len(d.floors) != 0 {
		t.Errorf("%d floors left after every request ended", len(d.floors))
	}
	d.mu.Unlock()
}

// failingExtend is a store whose Extend fails with err.
type failingExtend struct {
	idem.Store
	err error
}

func (s failingExtend) Extend(context.Context, string, int64, time.Time) error { return s.err }

// TestDrainerEdges: the drainer at its boundaries, one request at a time.
//   - Drain writes each claim's floor to the store itself (not only to its table), within its
//     own time limit, so the record's lease does not lapse while the upstream call may run.
//   - A floor the store refused for another reason than a lost lease is logged as a warning;
//     a lost lease (the claim is no longer this request's) is not.
//   - The claim clock counts an effect that began strictly before the cutoff.
//   - Abort waits for the last handler, not the first, to return.
func TestDrainerEdges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	t.Run("floor written", func(t *testing.T) {
		st := memstore.New()
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Now: now, Lease: time.Second, TTL: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatal(err, res)
		}
		d := newDrainer(idem.UncertainExpire, time.Minute, st, quiet)
		o := &upstreamOutcome{claimed: true, key: "k", token: res.Record.Token, expires: res.Record.ExpiresAt}
		deadline := now.Add(10 * time.Second)
		d.begin(o, deadline)
		d.drain()
		rec, err := st.Get(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if want := deadline.Add(time.Minute); !rec.LeaseUntil.Equal(want.Truncate(time.Microsecond)) && !rec.LeaseUntil.Equal(want) {
			t.Fatalf("lease until %v after Drain, want the floor %v (the call's deadline + the lease)", rec.LeaseUntil, want)
		}
		d.end(o)
	})

	t.Run("floor refused", func(t *testing.T) {
		for _, tc := range []struct {
			err  error
			warn bool
		}{{errors.New("store down"), true}, {idem.ErrLeaseLost, false}} {
			var log syncbuf.Buffer
			d := newDrainer(idem.UncertainExpire, time.Minute, failingExtend{memstore.New(), tc.err}, slog.New(slog.NewTextHandler(&log, nil)))
			o := &upstreamOutcome{claimed: true, key: "k", token: 1, expires: now.Add(time.Hour)}
			d.begin(o, now.Add(time.Second))
			d.drain()
			d.end(o)
			if got := strings.Contains(log.String(), "could not keep a claim"); got != tc.warn {
				t.Errorf("Extend failing with %v: warned %v, want %v\n%s", tc.err, got, tc.warn, log.String())
			}
		}
	})

	t.Run("overdue cutoff", func(t *testing.T) {
		d := newDrainer(idem.UncertainExpire, time.Minute, memstore.New(), quiet)
		o := &upstreamOutcome{}
		d.effectBegan(o, now)
		if n := d.effectsBefore(now); n != 0 {
			t.Errorf("an effect that began at the cutoff counted as before it (%d)", n)
		}
		if n := d.effectsBefore(now.Add(time.Nanosecond)); n != 1 {
			t.Errorf("an effect that began a nanosecond before the cutoff: %d, want 1", n)
		}
		d.end(o)
	})

	t.Run("abort with nothing out", func(t *testing.T) {
		d := newDrainer(idem.UncertainExpire, time.Minute, memstore.New(), quiet)
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if n := d.abort(actx); n != 0 || actx.Err() != nil {
			t.Fatalf("Abort with no call out: %d, returned when its context ended: %v", n, actx.Err() != nil)
		}
	})

	t.Run("raise and keeps", func(t *testing.T) {
		d := newDrainer(idem.UncertainRelease, time.Minute, memstore.New(), quiet)
		beat := now.Add(time.Second) // a heartbeat's extension
		o := &upstreamOutcome{claimed: true, key: "k", token: 7, expires: now.Add(time.Hour)}
		d.begin(o, now.Add(time.Minute))
		if got := d.raise("k", 7, beat); !got.Equal(beat) {
			t.Errorf("before Drain: an extension raised to %v", got)
		}
		if d.keeps("k", 7) {
			t.Error("before Abort: a release kept")
		}
		d.drain()
		floor := now.Add(time.Minute + time.Second) // release: the call's deadline + 1s
		for _, tc := range []struct {
			token int64
			until time.Time
			want  time.Time
		}{
			{7, beat, floor}, // the floor is later: it stands
			{7, floor.Add(time.Hour), floor.Add(time.Hour)}, // later than the floor: kept as asked
			{8, beat, beat}, // another claim of the key: no floor of its own
		} {
			if got := d.raise("k", tc.token, tc.until); !got.Equal(tc.want) {
				t.Errorf("extension of token %d to %v while draining: %v, want %v", tc.token, tc.until, got, tc.want)
			}
		}
		if d.keeps("k", 7) {
			t.Error("after Drain, before Abort: a release kept")
		}
		go d.abort(ctx)
		for !d.cut.Load() {
			time.Sleep(time.Millisecond)
		}
		if !d.keeps("k", 7) {
			t.Error("after Abort: the release of a cut call's claim not kept until its floor")
		}
		if d.keeps("k", 8) || d.keeps("other", 7) {
			t.Error("after Abort: the release of another claim kept")
		}
		d.mu.Lock()
		f := d.floors["k"]
		f.until = time.Now().Add(-time.Millisecond) // the floor has passed
		d.floors["k"] = f
		d.mu.Unlock()
		if d.keeps("k", 7) {
			t.Error("after Abort, past the floor: a release still kept")
		}
		d.end(o)
	})

	t.Run("abort waits for the last", func(t *testing.T) {
		d := newDrainer(idem.UncertainExpire, time.Minute, memstore.New(), quiet)
		const n = 3
		var os [n]*upstreamOutcome
		for i := range os {
			os[i] = &upstreamOutcome{}
			d.begin(os[i], now.Add(time.Minute))
		}
		aborted := make(chan int, 1)
		go func() { aborted <- d.abort(ctx) }()
		for !d.cut.Load() {
			time.Sleep(time.Millisecond)
		}
		for i := range n - 1 {
			d.end(os[i])
			select {
			case got := <-aborted:
				t.Fatalf("Abort returned %d after %d of %d handlers returned", got, i+1, n)
			case <-time.After(20 * time.Millisecond):
			}
		}
		d.end(os[n-1])
		select {
		case got := <-aborted:
			if got != n {
				t.Errorf("Abort counted %d calls out, want %d", got, n)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Abort did not return after the last handler returned")
		}
	})
}
