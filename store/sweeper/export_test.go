package sweeper

import (
	"context"
	"time"
)

// WithClock returns o with the pacing's clock and sleep replaced, for deterministic tests.
func WithClock(o Options, clock func() time.Time, sleep func(ctx context.Context, d time.Duration) bool) Options {
	o.clock, o.sleep = clock, sleep
	return o
}
