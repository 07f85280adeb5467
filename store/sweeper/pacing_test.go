package sweeper_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sweeper"
)

// sim is a store on a simulated clock: records expire at a rate, each Sweep call takes the
// time cost says, and the Sweeper's pauses advance the clock. The Sweeper's goroutine is the
// only one that moves time, so a run is deterministic; sleep parks it once the clock passes
// end, and the test then stops it.
type sim struct {
	mu      sync.Mutex
	now     time.Time
	end     time.Time
	arrival func(now time.Time) float64 // records expiring per second
	frac    float64
	expired int // backlog: expired records not yet deleted
	cost    func(now time.Time, n int) time.Duration
	calls   []call
	parked  chan struct{}
	counted int // CountExpired calls
}

type call struct {
	at              time.Time
	took            time.Duration
	size, deleted   int
	backlogAfterDel int
}

func newSim(end time.Duration, arrival func(time.Time) float64, cost func(time.Time, int) time.Duration) *sim {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	return &sim{now: t0, end: t0.Add(end), arrival: arrival, cost: cost, parked: make(chan struct{})}
}

// advance moves the clock by d, letting records expire meanwhile. s.mu is held.
func (s *sim) advance(d time.Duration) {
	for d > 0 {
		step := min(d, 10*time.Millisecond)
		s.frac += s.arrival(s.now) * step.Seconds()
		whole := math.Floor(s.frac)
		s.expired += int(whole)
		s.frac -= whole
		s.now = s.now.Add(step)
		d -= step
	}
}

func (s *sim) clock() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

func (s *sim) sleep(ctx context.Context, d time.Duration) bool {
	s.mu.Lock()
	if ctx.Err() != nil {
		s.mu.Unlock()
		return false
	}
	if !s.now.Before(s.end) {
		s.mu.Unlock()
		close(s.parked)
		<-ctx.Done()
		return false
	}
	s.advance(d)
	s.mu.Unlock()
	return true
}

func (s *sim) Sweep(ctx context.Context, _ time.Time, batch int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(batch, s.expired)
	took := s.cost(s.now, n)
	at := s.now
	s.advance(took)
	s.expired -= n
	s.calls = append(s.calls, call{at: at, took: took, size: batch, deleted: n, backlogAfterDel: s.expired})
	return n, nil
}

// counting is a sim that also counts its expired records, as the SQL stores do.
type counting struct{ *sim }

func (c counting) CountExpired(_ context.Context, _ time.Time, limit int) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counted++
	c.advance(time.Millisecond)
	return min(c.expired, limit), nil
}

// runSim runs a Sweeper over st (the sim or a wrapper of it) until the simulated end.
func runSim(t *testing.T, s *sim, st sweeper.Sweepable, opt sweeper.Options) {
	t.Helper()
	opt.Now = s.clock
	sw, err := sweeper.Start(st, sweeper.WithClock(opt, s.clock, s.sleep))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.parked:
	case <-time.After(30 * time.Second):
		t.Fatal("the simulated sweep did not reach its end within 30s of real time")
	}
	sw.Stop()
}

// deletedBetween sums the records deleted by calls that began in [from, to).
func (s *sim) deletedBetween(from, to time.Time) int {
	n := 0
	for _, c := range s.calls {
		if !c.at.Before(from) && c.at.Before(to) {
			n += c.deleted
		}
	}
	return n
}

// perRow is a store whose calls cost a fixed part plus a part per record deleted.
func perRow(fixed, row time.Duration) func(time.Time, int) time.Duration {
	return func(_ time.Time, n int) time.Duration { return fixed + time.Duration(n)*row }
}

// TestPacingKeepsUpWithArrivals: when records expire ten times faster, the Sweeper deletes
// ten times faster (it goes on while batches come back full instead of waiting an Interval),
// and the backlog stays within what one Interval brings.
func TestPacingKeepsUpWithArrivals(t *testing.T) {
	t.Parallel()
	const phase = 120 * time.Second
	var t0 time.Time
	arrival := func(now time.Time) float64 {
		if now.Sub(t0) < phase {
			return 300
		}
		return 3000
	}
	s := newSim(2*phase, arrival, perRow(time.Millisecond, 10*time.Microsecond))
	t0 = s.now
	maxBacklog := [2]int{}
	runSim(t, s, s, sweeper.Options{Interval: 2 * time.Second, Jitter: time.Nanosecond, MaxBatches: 5})
	for _, c := range s.calls {
		i := min(int(c.at.Sub(t0)/phase), 1)
		maxBacklog[i] = max(maxBacklog[i], c.backlogAfterDel+c.deleted)
	}
	// The second half of each phase, once the Sweeper has settled.
	slow := float64(s.deletedBetween(t0.Add(phase/2), t0.Add(phase))) / (phase / 2).Seconds()
	fast := float64(s.deletedBetween(t0.Add(phase+phase/2), t0.Add(2*phase))) / (phase / 2).Seconds()
	t.Logf("deleted %.0f/s while 300/s expired, %.0f/s while 3000/s did; largest backlog %v", slow, fast, maxBacklog)
	if slow < 300*0.85 || slow > 300*1.15 {
		t.Errorf("deleted %.0f records/s while 300/s expired: not keeping up", slow)
	}
	if fast < 3000*0.85 || fast > 3000*1.15 {
		t.Errorf("deleted %.0f records/s while 3000/s expired: not keeping up", fast)
	}
	// One Interval (2s) of arrivals, plus what arrives while a run works it off.
	for i, rate := range []int{300, 3000} {
		if limit := rate * 3; maxBacklog[i] > limit {
			t.Errorf("phase %d: backlog reached %d, more than %d (3s of arrivals)", i, maxBacklog[i], limit)
		}
	}
}

// TestPacingShrinksBatchesOnSlowStore: when the store's calls slow past TargetLatency, the
// batches halve until a call fits it again; when the store is quick again they grow back.
func TestPacingShrinksBatchesOnSlowStore(t *testing.T) {
	t.Parallel()
	var t0 time.Time
	slowFrom, slowTo := 30*time.Second, 90*time.Second
	cost := func(now time.Time, n int) time.Duration {
		if el := now.Sub(t0); el >= slowFrom && el < slowTo {
			return 2*time.Millisecond + time.Duration(n)*time.Millisecond // 1ms a record
		}
		return time.Millisecond + time.Duration(n)*10*time.Microsecond
	}
	s := newSim(120*time.Second, func(time.Time) float64 { return 0 }, cost)
	t0 = s.now
	s.expired = 10_000_000 // always behind: every batch full
	runSim(t, s, s, sweeper.Options{Interval: time.Second, Batch: 1000, MinBatch: 10, TargetLatency: 100 * time.Millisecond, MaxShare: 0.5})
	var before, during, after []call
	for _, c := range s.calls {
		switch el := c.at.Sub(t0); {
		case el < slowFrom:
			before = append(before, c)
		case el < slowTo:
			during = append(during, c)
		default:
			after = append(after, c)
		}
	}
	if len(during) < 10 || len(after) < 10 {
		t.Fatalf("%d calls while slow, %d after", len(during), len(after))
	}
	if before[len(before)-1].size != 1000 {
		t.Errorf("batch %d before the store slowed, want 1000", before[len(before)-1].size)
	}
	// 1000 → 500 → 250 → 125 → 62 records: 62ms, under the target.
	for i, c := range during {
		if i >= 4 && c.took > 100*time.Millisecond {
			t.Errorf("call %d while the store is slow took %s (batch %d): batches did not shrink", i, c.took, c.size)
		}
	}
	if last := during[len(during)-1]; last.size > 100 {
		t.Errorf("batch %d at the end of the slow phase, want at most 100", last.size)
	}
	if last := after[len(after)-1]; last.size != 1000 {
		t.Errorf("batch %d once the store is quick again, want back to 1000", last.size)
	}
}

// TestPacingMaxShare: over any 10s window, the time spent in the store stays within MaxShare
// (give or take one call at the window's edge), and with a backlog the Sweeper uses its share
// rather than idling.
func TestPacingMaxShare(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{0.05, 0.1, 0.5} {
		var t0 time.Time
		// Calls of varying length: 5ms to 95ms.
		i := 0
		cost := func(time.Time, int) time.Duration {
			i++
			return time.Duration(5+(i*37)%91) * time.Millisecond
		}
		s := newSim(300*time.Second, func(time.Time) float64 { return 0 }, cost)
		t0 = s.now
		s.expired = 100_000_000
		runSim(t, s, counting{s}, sweeper.Options{Interval: time.Second, MaxShare: share, MaxBatches: 7})
		const window = 10 * time.Second
		var worst float64
		for from := t0; from.Add(window).Before(s.end); from = from.Add(time.Second) {
			busy := time.Duration(0)
			for _, c := range s.calls {
				if !c.at.Before(from) && c.at.Before(from.Add(window)) {
					busy += c.took
				}
			}
			used := busy.Seconds() / window.Seconds()
			worst = max(worst, used)
			if busy > time.Duration(share*float64(window))+95*time.Millisecond {
				t.Errorf("MaxShare %g: %s of %s in the store from %s", share, busy, window, from.Sub(t0))
			}
		}
		total := time.Duration(0)
		for _, c := range s.calls {
			total += c.took
		}
		overall := total.Seconds() / s.end.Sub(t0).Seconds()
		t.Logf("MaxShare %g: worst 10s window %.3f, overall %.3f, %d counts", share, worst, overall, s.counted)
		// Runs end every 7 batches, but the backlog is counted at most once a minute.
		if s.counted < 1 || s.counted > 6 {
			t.Errorf("MaxShare %g: the backlog was counted %d times in 5 minutes, want 1 to 6", share, s.counted)
		}
		if overall < share*0.8 {
			t.Errorf("MaxShare %g: only %.3f of the time in the store with a backlog", share, overall)
		}
	}
}

// TestBacklogReported: with a store that counts its expired records, each batch reports the
// backlog left, down to 0 when the run catches up; rate and durations are reported too.
func TestBacklogReported(t *testing.T) {
	t.Parallel()
	s := newSim(30*time.Second, func(time.Time) float64 { return 0 }, perRow(time.Millisecond, 10*time.Microsecond))
	s.expired = 5500
	obs := &recorder{}
	runSim(t, s, counting{s}, sweeper.Options{OnEvent: obs.add, Interval: 10 * time.Second})
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.runs) < 2 || len(obs.batches) < 7 {
		t.Fatalf("%d runs, %d batches", len(obs.runs), len(obs.batches))
	}
	want := 4500
	for i, b := range obs.batches[:6] {
		if b.Backlog != max(want, 0) || b.Err != nil || b.Took <= 0 || b.Rate <= 0 {
			t.Errorf("batch %d = %+v, want backlog %d", i, b, max(want, 0))
		}
		want -= 1000
	}
	r := obs.runs[0]
	if r.Deleted != 5500 || r.Batches != 6 || !r.CaughtUp || r.Backlog != 0 || r.Busy <= 0 || r.Took < 9*r.Busy || r.Rate() <= 0 {
		t.Errorf("first run = %+v", r)
	}
	if r := obs.runs[1]; r.Deleted != 0 || !r.CaughtUp || r.Batches != 1 {
		t.Errorf("second run = %+v", r)
	}
}

// TestBacklogUnknown: a store that cannot count reports -1 until a batch comes back short.
func TestBacklogUnknown(t *testing.T) {
	t.Parallel()
	s := newSim(10*time.Second, func(time.Time) float64 { return 0 }, perRow(time.Millisecond, 0))
	s.expired = 2500
	obs := &recorder{}
	runSim(t, s, s, sweeper.Options{OnEvent: obs.add, Interval: 5 * time.Second})
	obs.mu.Lock()
	defer obs.mu.Unlock()
	got := []int{}
	for _, b := range obs.batches[:3] {
		got = append(got, b.Backlog)
	}
	if len(got) != 3 || got[0] != -1 || got[1] != -1 || got[2] != 0 {
		t.Errorf("backlogs %v, want [-1 -1 0]", got)
	}
}

type recorder struct {
	mu      sync.Mutex
	batches []sweeper.Batch
	runs    []sweeper.Run
	wrong   []sweeper.Event // events whose Outcome contradicts their batch or run
}

// add records a Sweeper's Event, checking that its Outcome says what its batch or run says.
func (r *recorder) add(ev sweeper.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var want sweeper.Outcome
	switch ev.Kind {
	case sweeper.EventBatch:
		r.batches = append(r.batches, ev.Batch)
		want = sweeper.OutcomeOK
		if ev.Batch.Err != nil {
			want = sweeper.OutcomeError
		}
	case sweeper.EventRun:
		r.runs = append(r.runs, ev.Run)
		want = sweeper.OutcomeBehind
		switch {
		case ev.Run.Err != nil:
			want = sweeper.OutcomeError
		case ev.Run.CaughtUp:
			want = sweeper.OutcomeCaughtUp
		}
	}
	if ev.Outcome != want {
		r.wrong = append(r.wrong, ev)
	}
}

// TestDrainPaced: Drain works off a backlog until a short batch; paced at MaxShare 0.25 it
// spends a quarter of its time in the store, at 1 all of it.
func TestDrainPaced(t *testing.T) {
	t.Parallel()
	for _, share := range []float64{1, 0.25} {
		s := newSim(time.Hour, func(time.Time) float64 { return 0 }, perRow(time.Millisecond, 10*time.Microsecond))
		s.expired = 25_500
		t0 := s.now
		o := sweeper.WithClock(sweeper.Options{MaxShare: share, Now: s.clock}, s.clock, s.sleep)
		r, err := sweeper.Drain(context.Background(), s, o)
		if err != nil || r.Deleted != 25_500 || !r.CaughtUp || r.Batches != 26 {
			t.Fatalf("MaxShare %g: Drain = %+v, %v", share, r, err)
		}
		got := r.Busy.Seconds() / s.now.Sub(t0).Seconds()
		if math.Abs(got-share) > 0.05*share {
			t.Errorf("MaxShare %g: Drain spent %.3f of its time in the store", share, got)
		}
	}
}

func TestDrainErrors(t *testing.T) {
	t.Parallel()
	if _, err := sweeper.Drain(context.Background(), nil, sweeper.Options{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("Drain(nil) = %v", err)
	}
	if _, err := sweeper.Drain(context.Background(), &countingStore{}, sweeper.Options{MaxShare: 2}); !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), "Options.MaxShare") {
		t.Errorf("Drain(MaxShare 2) = %v", err)
	}
	boom := errors.New("boom")
	st := &failing{err: boom, after: 2}
	r, err := sweeper.Drain(context.Background(), st, sweeper.Options{Batch: 10, MaxShare: 1})
	if !errors.Is(err, boom) || r.Deleted != 20 || r.Batches != 3 || r.CaughtUp {
		t.Errorf("Drain of a failing store = %+v, %v", r, err)
	}
}

// failing deletes full batches, then fails.
type failing struct {
	err   error
	after int
	calls int
}

func (f *failing) Sweep(_ context.Context, _ time.Time, batch int) (int, error) {
	f.calls++
	if f.calls > f.after {
		return 0, f.err
	}
	return batch, nil
}

// TestPacingKeepsBatchesWhenSizeIsNotTheCost: on a starved server every call is slow whatever
// its size. Halving the batch would only delete less per call, so the Sweeper tries it once,
// sees no gain, and keeps its batch; once the server answers quickly, nothing changes.
func TestPacingKeepsBatchesWhenSizeIsNotTheCost(t *testing.T) {
	t.Parallel()
	var t0 time.Time
	slowFrom, slowTo := 30*time.Second, 150*time.Second
	cost := func(now time.Time, n int) time.Duration {
		if el := now.Sub(t0); el >= slowFrom && el < slowTo {
			return 300*time.Millisecond + time.Duration(n)*10*time.Microsecond // scheduling delay
		}
		return time.Millisecond + time.Duration(n)*10*time.Microsecond
	}
	s := newSim(180*time.Second, func(time.Time) float64 { return 0 }, cost)
	t0 = s.now
	s.expired = 10_000_000
	runSim(t, s, s, sweeper.Options{Interval: time.Second, Batch: 1000, MinBatch: 10, TargetLatency: 100 * time.Millisecond, MaxShare: 0.5})
	var during []call
	for _, c := range s.calls {
		if el := c.at.Sub(t0); el >= slowFrom && el < slowTo {
			during = append(during, c)
		}
	}
	small := 0
	for _, c := range during {
		if c.size < 1000 {
			small++
		}
	}
	// One halving to learn, and one more after each floorProbes slow calls.
	if len(during) < 50 || small > 1+len(during)/16 {
		t.Errorf("%d of %d calls on the starved server asked for less than the full batch", small, len(during))
	}
	// At MaxShare 0.5 a full batch of 310ms is followed by a pause of 310ms: 1000 records
	// per 620ms, about 1600 a second. Batches of 10 would delete 16 a second.
	rate := float64(s.deletedBetween(t0.Add(slowFrom), t0.Add(slowTo))) / (slowTo - slowFrom).Seconds()
	if rate < 1300 {
		t.Errorf("deleted %.0f records a second on the starved server, want about 1600", rate)
	}
}
