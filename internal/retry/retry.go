// Package retry holds the timing of retries that idemclient's Transport and idemgrpc's client
// interceptor share: defaults and checks of the options, full-jitter backoff, and the window
// of a call's budget in which one more attempt is still useful.
package retry

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// Schedule is the retry timing of one client.
type Schedule struct {
	// MaxAttempts caps the attempts per call, the first included. Default 5.
	MaxAttempts int
	// BaseDelay is the backoff before the first retry; it doubles with each retry. Default 100ms.
	BaseDelay time.Duration
	// MaxDelay caps one backoff delay. Default 5s.
	MaxDelay time.Duration
	// MaxElapsed caps the total time of a call, retries included. Default 30s.
	MaxElapsed time.Duration
	// AttemptTimeout bounds one attempt; 0 means no bound.
	AttemptTimeout time.Duration
}

// Init fills the defaults of s and checks it. The error names the field as
// opts.Field ("Options.MaxAttempts") and says what is wrong; the caller wraps it.
func (s *Schedule) Init(pkg, opts string) error {
	bad := func(field, format string, args ...any) error {
		return &idem.OptionError{Package: pkg, Field: opts + "." + field, Problem: fmt.Sprintf(format, args...)}
	}
	s.MaxAttempts = cmp.Or(s.MaxAttempts, 5)
	s.BaseDelay = cmp.Or(s.BaseDelay, 100*time.Millisecond)
	s.MaxDelay = cmp.Or(s.MaxDelay, 5*time.Second)
	s.MaxElapsed = cmp.Or(s.MaxElapsed, 30*time.Second)
	switch {
	case s.MaxAttempts < 1:
		return bad("MaxAttempts", "%d is below 1", s.MaxAttempts)
	case s.BaseDelay < 0:
		return bad("BaseDelay", "%s is negative", s.BaseDelay)
	case s.MaxDelay < s.BaseDelay:
		return bad("MaxDelay", "%s is below %s.BaseDelay %s", s.MaxDelay, opts, s.BaseDelay)
	case s.MaxElapsed < 0:
		return bad("MaxElapsed", "%s is negative", s.MaxElapsed)
	case s.AttemptTimeout < 0:
		return bad("AttemptTimeout", "%s is negative", s.AttemptTimeout)
	}
	return nil
}

// Backoff returns the full-jitter delay before retry number attempt (1 for the first retry):
// uniform in [0, min(MaxDelay, BaseDelay·2^(attempt-1))], drawn with rand (rand.Int64N).
func (s *Schedule) Backoff(attempt int, rand func(n int64) int64) time.Duration {
	ceiling := s.MaxDelay
	if shift := attempt - 1; shift < 32 {
		if d := s.BaseDelay << shift; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand(int64(ceiling) + 1))
}

// Window is the time budget of one call.
type Window struct {
	// Start is when the call began, Deadline when its budget ends (MaxElapsed after Start, or
	// the context's deadline if earlier).
	Start, Deadline time.Time
	// LastUseful is the last moment at which another attempt may start: the deadline less the
	// time kept for that attempt (AttemptTimeout, at most half the budget, or a tenth of the
	// budget without AttemptTimeout).
	LastUseful time.Time
}

// Window returns the budget of a call starting at now under ctx.
func (s *Schedule) Window(ctx context.Context, now time.Time) Window {
	deadline := now.Add(s.MaxElapsed)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	budget := deadline.Sub(now)
	reserve := budget / 10
	if s.AttemptTimeout > 0 {
		reserve = min(s.AttemptTimeout, budget/2)
	}
	return Window{Start: now, Deadline: deadline, LastUseful: deadline.Add(-reserve)}
}

// Pause returns how long to wait before the next attempt: the larger of the backoff drawn and
// the wait the server asked for, cut short to the last useful moment (a server's delay
// estimates when the answer will exist, and one more look may find it early). ok is false
// when now is already past the last useful moment.
func (w Window) Pause(now time.Time, backoff, wait time.Duration) (d time.Duration, ok bool) {
	if !now.Before(w.LastUseful) {
		return 0, false
	}
	return min(max(backoff, wait), w.LastUseful.Sub(now)), true
}

// Sleep waits d or until ctx is done, whichever is first, and returns ctx's error in the
// second case (or at once for d ≤ 0 with ctx done).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
