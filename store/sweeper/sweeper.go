package sweeper

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem"
)

// Sweepable is what a Sweeper sweeps: every idem.Store is one.
type Sweepable interface {
	Sweep(ctx context.Context, now time.Time, batch int) (int, error)
}

// ExpiredCounter is a store that can count its expired records cheaply, through the index a
// sweep uses. A Sweeper whose store implements it reports the backlog (Batch.Backlog,
// Run.Backlog) from a count taken as each run begins; pgstore, mysqlstore and sqlitestore
// implement it.
type ExpiredCounter interface {
	// CountExpired returns how many records expired at or before now, counting no further
	// than limit (so a huge backlog costs a bounded read): a result of limit means "at least".
	CountExpired(ctx context.Context, now time.Time, limit int) (int, error)
}

// Needed reports whether st keeps expired records until someone deletes them: false for a
// store that implements idem.SelfExpiring and says its storage deletes them by itself (Redis,
// DynamoDB), true otherwise. Sweeping such a store is allowed, but it only deletes records
// sooner, and may cost more than it saves (a DynamoDB Sweep is a paid Scan).
func Needed(st Sweepable) bool {
	se, ok := st.(idem.SelfExpiring)
	return !ok || !se.SelfExpiring()
}

// Options configure a Sweeper. The zero value is a good default for every field.
//
// A Sweeper is paced so that live traffic keeps the store: each Sweep call deletes at most a
// batch of records, the batch shrinks by half when a call takes longer than TargetLatency and
// grows back by a tenth of Batch while full calls stay quick (additive increase,
// multiplicative decrease). A halving that does not make calls quicker (a starved server,
// where a call's time does not follow its size) is undone, since smaller batches would only
// delete less for the same time. After a call that took d the Sweeper waits at least
// d×(1−MaxShare)/MaxShare, so it spends at most MaxShare of the wall time in the store. While
// batches come back full it goes on (it is behind: expired records arrive faster than one run
// a Interval deletes); a short batch ends the run and the next begins one Interval later.
type Options struct {
	// Interval is the average time between runs once a run has caught up (its last batch came
	// back short). Default 1m.
	Interval time.Duration
	// Jitter spreads runs: each wait is Interval plus or minus a random part of up to
	// Jitter, so processes sharing a database do not sweep in step. Default Interval/5; it
	// must be below Interval.
	Jitter time.Duration
	// Batch is the most records one Sweep call deletes, and the size the first call asks
	// for: each call is one short statement, never a long lock. Default 1000.
	Batch int
	// MinBatch is the smallest batch the Sweeper shrinks to when calls are slow. Default
	// Batch/10, at least 1; it must not exceed Batch.
	MinBatch int
	// TargetLatency is how long one Sweep call should take at most: a call that takes longer
	// halves the next batch (down to MinBatch). Default 100ms.
	TargetLatency time.Duration
	// MaxShare is the largest fraction of wall time the Sweeper spends in the store's Sweep
	// (and CountExpired) calls, from above 0 to 1: after a call that took d it pauses at least
	// d×(1−MaxShare)/MaxShare. 1 sweeps batch after batch without a pause. Default 0.1.
	MaxShare float64
	// MaxBatches bounds the batches of one run: a run that reaches it ends (and is reported
	// to OnEvent) and, since the backlog is not gone, the next begins after the
	// pacing pause rather than after Interval. Default 100.
	MaxBatches int
	// CountLimit bounds the count of expired records taken as each run begins from a store
	// that implements ExpiredCounter: the backlog reported is then "at least CountLimit".
	// Default 1,000,000; -1 takes no count.
	CountLimit int
	// Timeout bounds each Sweep call. Default 30s.
	Timeout time.Duration
	// Now is the clock records expire by. Default time.Now. (Pacing measures the calls with
	// the real clock.)
	Now func() time.Time
	// Logger receives sweep errors (at Warn) and runs that deleted something (at Debug).
	// Default slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called after each batch (one Sweep call) and after each run, from
	// the Sweeper's goroutine, with what it did: the records deleted, the backlog left, the
	// rate, the durations (for metrics and tests). It must return quickly. Default nil.
	OnEvent func(Event)

	// clock and sleep are the pacing's clock: real time unless a test sets them.
	clock func() time.Time
	sleep func(ctx context.Context, d time.Duration) bool
}

// Outcome says how a batch or a run ended. Its values are short, stable, lowercase labels,
// fit for metrics.
type Outcome string

// The outcomes of Event.
const (
	// OutcomeOK: a batch (Sweep call) succeeded.
	OutcomeOK Outcome = "ok"
	// OutcomeCaughtUp: a run's last batch came back short: nothing expired was left.
	OutcomeCaughtUp Outcome = "caught_up"
	// OutcomeBehind: a run stopped after MaxBatches batches with expired records left; the
	// next begins after the pacing pause.
	OutcomeBehind Outcome = "behind"
	// OutcomeError: the batch, or the run's last batch, failed (Batch.Err, Run.Err).
	OutcomeError Outcome = "error"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventBatch reports one Sweep call, in Event.Batch.
	EventBatch EventKind = iota + 1
	// EventRun reports a run, in Event.Run: its batches from the first to the one that came
	// back short, failed, or was the run's MaxBatches-th.
	EventRun
)

// String returns "batch", "run" or "unknown".
func (k EventKind) String() string {
	switch k {
	case EventBatch:
		return "batch"
	case EventRun:
		return "run"
	}
	return "unknown"
}

// Event describes a batch or a run of a Sweeper, for Options.OnEvent.
type Event struct {
	// Kind is EventBatch or EventRun.
	Kind EventKind
	// Outcome is how the batch (OutcomeOK, OutcomeError) or the run (OutcomeCaughtUp,
	// OutcomeBehind, OutcomeError) ended.
	Outcome Outcome
	// Batch is the batch, for EventBatch.
	Batch Batch
	// Run is the run, for EventRun.
	Run Run
}

// Batch describes one Sweep call of a Sweeper.
type Batch struct {
	// Size is how many records the call was asked to delete at most; Deleted how many it did.
	Size, Deleted int
	// Took is how long the call took.
	Took time.Duration
	// Pause is how long the Sweeper waits before its next call, if the run goes on.
	Pause time.Duration
	// Backlog is the estimated number of expired records left after the call: 0 after a
	// short batch, -1 when unknown (the store does not implement ExpiredCounter).
	Backlog int
	// Rate is the records deleted per second since the run began, pauses included.
	Rate float64
	// Err is the call's error, if any.
	Err error
}

// Run describes one run of a Sweeper: its batches from the first to the one that came back
// short, failed, or reached MaxBatches.
type Run struct {
	// Deleted is how many records the run deleted, in Batches calls.
	Deleted, Batches int
	// Took is the run's wall time, pauses included; Busy the part spent in store calls.
	Took, Busy time.Duration
	// Backlog is the estimated number of expired records left: 0 if the run caught up, -1
	// when unknown.
	Backlog int
	// CaughtUp reports whether the last batch came back short: nothing expired was left.
	CaughtUp bool
	// Err is the error that ended the run, if any.
	Err error
}

// outcome is how the run ended.
func (r Run) outcome() Outcome {
	switch {
	case r.Err != nil:
		return OutcomeError
	case r.CaughtUp:
		return OutcomeCaughtUp
	}
	return OutcomeBehind
}

// Rate is the records the run deleted per second of its wall time.
func (r Run) Rate() float64 {
	if r.Took <= 0 {
		return 0
	}
	return float64(r.Deleted) / r.Took.Seconds()
}

func (o Options) withDefaults() (Options, error) {
	o.Interval = cmp.Or(o.Interval, time.Minute)
	o.Jitter = cmp.Or(o.Jitter, o.Interval/5)
	o.Batch = cmp.Or(o.Batch, 1000)
	o.MinBatch = cmp.Or(o.MinBatch, max(1, o.Batch/10))
	o.TargetLatency = cmp.Or(o.TargetLatency, 100*time.Millisecond)
	o.MaxShare = cmp.Or(o.MaxShare, 0.1)
	o.MaxBatches = cmp.Or(o.MaxBatches, 100)
	o.CountLimit = cmp.Or(o.CountLimit, 1_000_000)
	o.Timeout = cmp.Or(o.Timeout, 30*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.clock == nil {
		o.clock = time.Now
	}
	if o.sleep == nil {
		o.sleep = sleep
	}
	bad := func(field, format string, args ...any) (Options, error) {
		return o, &idem.OptionError{Package: "sweeper", Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	switch {
	case o.Interval < time.Millisecond:
		return bad("Options.Interval", "%s is below 1ms", o.Interval)
	case o.Jitter < 0 || o.Jitter >= o.Interval:
		return bad("Options.Jitter", "%s must be at least 0 and below Interval %s", o.Jitter, o.Interval)
	case o.Batch < 1:
		return bad("Options.Batch", "%d is below 1", o.Batch)
	case o.MinBatch < 1 || o.MinBatch > o.Batch:
		return bad("Options.MinBatch", "%d must be from 1 to Batch %d", o.MinBatch, o.Batch)
	case o.TargetLatency < time.Millisecond:
		return bad("Options.TargetLatency", "%s is below 1ms", o.TargetLatency)
	case !(o.MaxShare > 0 && o.MaxShare <= 1): // NaN too
		return bad("Options.MaxShare", "%g must be above 0 and at most 1", o.MaxShare)
	case o.MaxBatches < 1:
		return bad("Options.MaxBatches", "%d is below 1", o.MaxBatches)
	case o.CountLimit < -1:
		return bad("Options.CountLimit", "%d is below -1", o.CountLimit)
	case o.Timeout < time.Millisecond:
		return bad("Options.Timeout", "%s is below 1ms", o.Timeout)
	}
	return o, nil
}

// sleep waits d, or until ctx ends; it reports whether it waited d.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Sweeper deletes expired records of a store in the background. Create it with Start and end
// it with Stop.
type Sweeper struct {
	st     Sweepable
	opt    Options
	pace   *pacer
	cancel context.CancelFunc
	done   chan struct{}
}

// Start starts sweeping st: a first run after one (jittered) interval, then one every
// interval once caught up, paced as Options describes. It returns an *idem.OptionError
// (matching idem.ErrInvalidInput) naming the field for bad options.
func Start(st Sweepable, opt Options) (*Sweeper, error) {
	if st == nil {
		return nil, &idem.OptionError{Package: "sweeper", Field: "st", Problem: "is nil"}
	}
	o, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sweeper{st: st, opt: o, pace: newPacer(o), cancel: cancel, done: make(chan struct{})}
	go s.loop(ctx)
	return s, nil
}

// Stop ends the sweeper and waits for its goroutine to return; a sweep under way is
// cancelled. It is safe to call more than once and from several goroutines.
func (s *Sweeper) Stop() {
	s.cancel()
	<-s.done
}

func (s *Sweeper) loop(ctx context.Context) {
	defer close(s.done)
	wait := s.next()
	for s.opt.sleep(ctx, wait) {
		r, pause := run(ctx, s.st, s.opt, s.pace, s.opt.MaxBatches)
		if ctx.Err() != nil {
			return // stopped mid-run: not an error worth reporting
		}
		switch {
		case r.Err != nil:
			s.opt.Logger.Warn("idem: sweep failed", "deleted", r.Deleted, "err", r.Err)
		case r.Deleted > 0:
			s.opt.Logger.Debug("idem: swept expired records", "deleted", r.Deleted, "batches", r.Batches,
				"took", r.Took, "backlog", r.Backlog, "caught_up", r.CaughtUp)
		}
		wait = max(s.next(), pause)
		if !r.CaughtUp && r.Err == nil {
			wait = pause // behind: go on once the store has had its share
		}
	}
}

// next returns Interval ± a uniform random part of Jitter.
func (s *Sweeper) next() time.Duration {
	if s.opt.Jitter == 0 {
		return s.opt.Interval
	}
	return s.opt.Interval - s.opt.Jitter + rand.N(2*s.opt.Jitter+1)
}

// Drain sweeps st once, paced as opt describes, until a batch comes back short (opt's
// MaxBatches, Interval and Jitter do not apply), and returns what it did. It is a one-off
// sweep for an operator or a cron job; with MaxShare 1 it goes as fast as the store allows.
// It returns an *idem.OptionError (matching idem.ErrInvalidInput) naming the field for bad options, and
// the run's error otherwise (Run.Deleted counts the records deleted before it).
func Drain(ctx context.Context, st Sweepable, opt Options) (Run, error) {
	if st == nil {
		return Run{}, &idem.OptionError{Package: "sweeper", Field: "st", Problem: "is nil"}
	}
	o, err := opt.withDefaults()
	if err != nil {
		return Run{}, err
	}
	r, _ := run(ctx, st, o, newPacer(o), math.MaxInt)
	return r, r.Err
}

// run is one run: batches, paced, until one comes back short or fails, or maxBatches ran. It
// returns the run and the pause owed before the next call.
func run(ctx context.Context, st Sweepable, o Options, p *pacer, maxBatches int) (Run, time.Duration) {
	start := o.clock()
	var r Run
	var pause time.Duration
	// The backlog is counted as a run begins, unless the previous run left an estimate
	// younger than a minute (a run that stops at MaxBatches does not pay for a count again).
	backlog := p.backlog
	if backlog == 0 {
		backlog = -1 // caught up last time: unknown again until counted or a batch comes back short
	}
	if c, ok := st.(ExpiredCounter); ok && o.CountLimit > 0 && (backlog < 0 || start.Sub(p.counted) >= time.Minute) {
		p.counted = start
		backlog = -1
		t := o.clock()
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		n, err := c.CountExpired(cctx, o.Now(), o.CountLimit)
		cancel()
		took := o.clock().Sub(t)
		r.Busy += took
		if err == nil {
			backlog = n
		}
		if ctx.Err() != nil {
			r.Err = ctx.Err()
			return r, 0
		}
		// The count is a read the store pays for too: it is part of the share.
		pause = p.share(took)
	}
	for r.Batches < maxBatches {
		if r.Batches > 0 || pause > 0 {
			if !o.sleep(ctx, pause) {
				r.Err = ctx.Err()
				break
			}
		}
		size := p.batch
		t := o.clock()
		cctx, cancel := context.WithTimeout(ctx, o.Timeout)
		n, err := st.Sweep(cctx, o.Now(), size)
		cancel()
		end := o.clock()
		took := end.Sub(t)
		r.Batches++
		r.Deleted += n
		r.Busy += took
		pause = p.done(size, n, took)
		switch {
		case err == nil && n < size:
			backlog, r.CaughtUp = 0, true
		case backlog >= 0:
			backlog = max(backlog-n, 0)
		}
		b := Batch{Size: size, Deleted: n, Took: took, Pause: pause, Backlog: backlog, Err: err}
		if el := end.Sub(start); el > 0 {
			b.Rate = float64(r.Deleted) / el.Seconds()
		}
		if o.OnEvent != nil {
			ev := Event{Kind: EventBatch, Outcome: OutcomeOK, Batch: b}
			if err != nil {
				ev.Outcome = OutcomeError
			}
			o.OnEvent(ev)
		}
		if err != nil {
			r.Err = err
			break
		}
		if r.CaughtUp {
			break
		}
	}
	r.Took = o.clock().Sub(start)
	r.Backlog, p.backlog = backlog, backlog
	if o.OnEvent != nil && (ctx.Err() == nil || r.Batches > 0) {
		o.OnEvent(Event{Kind: EventRun, Outcome: r.outcome(), Run: r})
	}
	return r, pause
}

// pacer sizes batches and spaces them: additive increase, multiplicative decrease of the
// batch on TargetLatency, and a pause that keeps the time in the store under MaxShare.
type pacer struct {
	batch, min, max int
	step            int
	target          time.Duration
	maxShare        float64
	// A halving that did not make calls quicker (a starved server, where a call's time is
	// not its size) is undone, and no batch below floor is tried again until a call is
	// quick or probes slow calls at floor have passed.
	floor      int
	halvedFrom int           // the size before the last halving; 0: the last change was not one
	slowBefore time.Duration // how long the call before that halving took
	probes     int           // slow calls at floor since it was raised
	// backlog is the estimate the last run left (-1: none), counted at counted.
	backlog int
	counted time.Time
}

func newPacer(o Options) *pacer {
	return &pacer{batch: o.Batch, min: o.MinBatch, max: o.Batch, step: max(1, o.Batch/10),
		target: o.TargetLatency, maxShare: o.MaxShare, backlog: -1, floor: o.MinBatch}
}

// done adjusts the batch after a call asked for size records, deleted n and took took, and
// returns the pause owed before the next call.
func (p *pacer) done(size, n int, took time.Duration) time.Duration {
	if took <= p.target {
		p.floor, p.halvedFrom, p.probes = p.min, 0, 0
		if n >= size && took <= p.target/2 {
			p.batch = min(p.max, size+p.step)
		}
		return p.share(took)
	}
	switch {
	case p.halvedFrom > 0 && took*4 > p.slowBefore*3:
		// Half the batch took more than three quarters of the time: the size is not what
		// makes calls slow, and smaller batches would only delete less per call.
		p.batch, p.floor, p.halvedFrom, p.probes = p.halvedFrom, p.halvedFrom, 0, 0
	case size/2 >= p.floor || p.probes >= floorProbes:
		p.halvedFrom, p.slowBefore, p.probes = size, took, 0
		p.batch = max(p.min, size/2)
	default:
		p.halvedFrom = 0
		p.probes++
	}
	return p.share(took)
}

// floorProbes is how many slow calls at the floor pass before a smaller batch is tried again.
const floorProbes = 16

// share returns the pause after a call of took that keeps the store's share at MaxShare.
func (p *pacer) share(took time.Duration) time.Duration {
	if p.maxShare >= 1 || took <= 0 {
		return 0
	}
	return time.Duration(float64(took) * (1 - p.maxShare) / p.maxShare)
}

// Sweep deletes records of st that expired before now, batch at a time, until a batch comes
// back short or maxBatches ran; each call is bounded by timeout (0: only by ctx). It returns
// how many it deleted, also on error. It does not pace: see Drain for a paced one-off sweep.
func Sweep(ctx context.Context, st Sweepable, now time.Time, batch, maxBatches int, timeout time.Duration) (int, error) {
	total := 0
	for range maxBatches {
		c, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			c, cancel = context.WithTimeout(ctx, timeout)
		}
		n, err := st.Sweep(c, now, batch)
		cancel()
		total += n
		if err != nil {
			return total, err
		}
		if n < batch {
			break
		}
	}
	return total, nil
}
