package sweeper_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/sweeper"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type countingStore struct {
	calls   atomic.Int64
	deleted atomic.Int64
	left    atomic.Int64
}

func (c *countingStore) Sweep(ctx context.Context, _ time.Time, batch int) (int, error) {
	c.calls.Add(1)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n := min(int64(batch), c.left.Load())
	c.left.Add(-n)
	c.deleted.Add(n)
	return int(n), nil
}

func TestSweeper(t *testing.T) {
	t.Parallel()
	st := &countingStore{}
	st.left.Store(1050)
	runs := make(chan sweeper.Event, 100)
	sw, err := sweeper.Start(st, sweeper.Options{
		Interval: 10 * time.Millisecond, Batch: 100, MaxBatches: 5,
		OnEvent: func(ev sweeper.Event) {
			if ev.Kind != sweeper.EventRun {
				return
			}
			select {
			case runs <- ev:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A backlog is worked off MaxBatches at a time: 500, 500 (behind), then the short batch of
	// 50 (caught up).
	for i, want := range []struct {
		deleted int
		outcome sweeper.Outcome
	}{{500, sweeper.OutcomeBehind}, {500, sweeper.OutcomeBehind}, {50, sweeper.OutcomeCaughtUp}, {0, sweeper.OutcomeCaughtUp}} {
		select {
		case ev := <-runs:
			if ev.Run.Deleted != want.deleted || ev.Outcome != want.outcome || ev.Run.Err != nil {
				t.Errorf("run %d deleted %d, %s (%v), want %d, %s", i, ev.Run.Deleted, ev.Outcome, ev.Run.Err, want.deleted, want.outcome)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("sweeper did not sweep")
		}
	}
	sw.Stop()
	calls := st.calls.Load()
	time.Sleep(30 * time.Millisecond)
	if st.calls.Load() != calls {
		t.Error("sweeper swept after Stop")
	}
	sw.Stop()
}

type failingStore struct{}

var errSweep = errors.New("sweep failed")

func (failingStore) Sweep(context.Context, time.Time, int) (int, error) { return 0, errSweep }

// TestEventOutcomeError: a failed Sweep call is reported as a batch and a run, both with
// OutcomeError and the error.
func TestEventOutcomeError(t *testing.T) {
	t.Parallel()
	var evs []sweeper.Event
	r, err := sweeper.Drain(context.Background(), failingStore{}, sweeper.Options{OnEvent: func(ev sweeper.Event) { evs = append(evs, ev) }})
	if !errors.Is(err, errSweep) || r.Err == nil {
		t.Fatalf("Drain = %+v, %v", r, err)
	}
	if len(evs) != 2 || evs[0].Kind != sweeper.EventBatch || evs[0].Outcome != sweeper.OutcomeError || !errors.Is(evs[0].Batch.Err, errSweep) ||
		evs[1].Kind != sweeper.EventRun || evs[1].Outcome != sweeper.OutcomeError || !errors.Is(evs[1].Run.Err, errSweep) {
		t.Errorf("events %+v, want a failed batch, then a failed run", evs)
	}
}

func TestSweeperOptions(t *testing.T) {
	t.Parallel()
	st := &countingStore{}
	for _, tc := range []struct {
		opt   sweeper.Options
		field string
	}{
		{sweeper.Options{Interval: time.Microsecond}, "Interval"},
		{sweeper.Options{Interval: time.Second, Jitter: time.Second}, "Jitter"},
		{sweeper.Options{Jitter: -time.Second}, "Jitter"},
		{sweeper.Options{Batch: -1}, "Batch"},
		{sweeper.Options{MaxBatches: -1}, "MaxBatches"},
		{sweeper.Options{Timeout: -1}, "Timeout"},
		{sweeper.Options{MinBatch: -1}, "MinBatch"},
		{sweeper.Options{Batch: 10, MinBatch: 11}, "MinBatch"},
		{sweeper.Options{TargetLatency: time.Microsecond}, "TargetLatency"},
		{sweeper.Options{MaxShare: -0.1}, "MaxShare"},
		{sweeper.Options{MaxShare: 1.01}, "MaxShare"},
		{sweeper.Options{MaxShare: math.NaN()}, "MaxShare"},
		{sweeper.Options{CountLimit: -2}, "CountLimit"},
	} {
		if _, err := sweeper.Start(st, tc.opt); !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), "Options."+tc.field) {
			t.Errorf("Start(%+v) = %v, want ErrInvalidInput naming %s", tc.opt, err, tc.field)
		}
	}
	if _, err := sweeper.Start(nil, sweeper.Options{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("Start(nil) = %v", err)
	}
}

type selfExpiring struct {
	countingStore
	on bool
}

func (s *selfExpiring) SelfExpiring() bool { return s.on }

func TestNeeded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		st   sweeper.Sweepable
		want bool
	}{
		{"memstore", memstore.New(), true},
		{"a store that does not say", &countingStore{}, true},
		{"a store that expires records itself", &selfExpiring{on: true}, false},
		{"a store that says it does not", &selfExpiring{on: false}, true},
	} {
		if got := sweeper.Needed(tc.st); got != tc.want {
			t.Errorf("Needed(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSweepUntilShort: Sweep stops at the first short batch, or after maxBatches; a timeout
// of 0 bounds the calls by ctx alone.
func TestSweepUntilShort(t *testing.T) {
	t.Parallel()
	st := &countingStore{}
	st.left.Store(1050)
	ctx := context.Background()
	if n, err := sweeper.Sweep(ctx, st, time.Now(), 100, 3, time.Second); n != 300 || err != nil {
		t.Fatalf("Sweep with 3 batches = %d, %v; want 300", n, err)
	}
	if n, err := sweeper.Sweep(ctx, st, time.Now(), 100, 1000, 0); n != 750 || err != nil || st.calls.Load() != 3+8 {
		t.Fatalf("Sweep without a timeout = %d, %v after %d calls; want 750 in 8 calls", n, err, st.calls.Load()-3)
	}
}
