package sweeper

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem"
)

// Sweepable is what a Sweeper sweeps: every idem.Store is one.
type Sweepable interface {
	Sweep(ctx context.Context, now time.Time, batch int) (int, error)
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
type Options struct {
	// Interval is the average time between sweeps. Default 1m.
	Interval time.Duration
	// Jitter spreads sweeps: each wait is Interval plus or minus a random part of up to
	// Jitter, so processes sharing a database do not sweep in step. Default Interval/5; it
	// must be below Interval.
	Jitter time.Duration
	// Batch is how many records one Sweep call deletes at most: each call is one short
	// statement, never a long lock. Default 1000.
	Batch int
	// MaxBatches bounds the batches of one sweep, so a large backlog is worked off over
	// several intervals instead of in one burst. Default 100.
	MaxBatches int
	// Timeout bounds each Sweep call. Default 30s.
	Timeout time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives sweep errors (at Warn) and sweeps that deleted something (at Debug).
	// Default slog.Default().
	Logger *slog.Logger
	// OnSweep, if set, is called after each sweep with how many records it deleted and its
	// error, from the Sweeper's goroutine (for metrics and tests).
	OnSweep func(deleted int, err error)
}

func (o Options) withDefaults() (Options, error) {
	o.Interval = cmp.Or(o.Interval, time.Minute)
	o.Jitter = cmp.Or(o.Jitter, o.Interval/5)
	o.Batch = cmp.Or(o.Batch, 1000)
	o.MaxBatches = cmp.Or(o.MaxBatches, 100)
	o.Timeout = cmp.Or(o.Timeout, 30*time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("sweeper: %w: "+format, append([]any{idem.ErrInvalidInput}, args...)...)
	}
	switch {
	case o.Interval < time.Millisecond:
		return bad("Options.Interval %s is below 1ms", o.Interval)
	case o.Jitter < 0 || o.Jitter >= o.Interval:
		return bad("Options.Jitter %s must be at least 0 and below Interval %s", o.Jitter, o.Interval)
	case o.Batch < 1:
		return bad("Options.Batch %d is below 1", o.Batch)
	case o.MaxBatches < 1:
		return bad("Options.MaxBatches %d is below 1", o.MaxBatches)
	case o.Timeout < time.Millisecond:
		return bad("Options.Timeout %s is below 1ms", o.Timeout)
	}
	return o, nil
}

// Sweeper deletes expired records of a store in the background. Create it with Start and end
// it with Stop.
type Sweeper struct {
	st     Sweepable
	opt    Options
	cancel context.CancelFunc
	done   chan struct{}
}

// Start starts sweeping st: a first sweep after one (jittered) interval, then one
// every interval. It returns an error wrapping idem.ErrInvalidInput, naming the field, for bad
// options.
func Start(st Sweepable, opt Options) (*Sweeper, error) {
	if st == nil {
		return nil, fmt.Errorf("sweeper: %w: store is nil", idem.ErrInvalidInput)
	}
	o, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sweeper{st: st, opt: o, cancel: cancel, done: make(chan struct{})}
	go s.run(ctx)
	return s, nil
}

// Stop ends the sweeper and waits for its goroutine to return; a sweep under way is
// cancelled. It is safe to call more than once and from several goroutines.
func (s *Sweeper) Stop() {
	s.cancel()
	<-s.done
}

func (s *Sweeper) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTimer(s.next())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := Sweep(ctx, s.st, s.opt.Now(), s.opt.Batch, s.opt.MaxBatches, s.opt.Timeout)
		if ctx.Err() != nil {
			return // stopped mid-sweep: not an error worth reporting
		}
		switch {
		case err != nil:
			s.opt.Logger.Warn("idem: sweep failed", "deleted", n, "err", err)
		case n > 0:
			s.opt.Logger.Debug("idem: swept expired records", "deleted", n)
		}
		if s.opt.OnSweep != nil {
			s.opt.OnSweep(n, err)
		}
		t.Reset(s.next())
	}
}

// next returns Interval ± a uniform random part of Jitter.
func (s *Sweeper) next() time.Duration {
	if s.opt.Jitter == 0 {
		return s.opt.Interval
	}
	return s.opt.Interval - s.opt.Jitter + rand.N(2*s.opt.Jitter+1)
}

// Sweep deletes records of st that expired before now, batch at a time, until a batch comes
// back short or maxBatches ran; each call is bounded by timeout (0: only by ctx). It returns
// how many it deleted, also on error.
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
