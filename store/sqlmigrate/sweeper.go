package sqlmigrate

import (
	"context"
	"time"

	"github.com/idemkit/idem/store/sweeper"
)

// Sweepable is what a Sweeper sweeps.
//
// Deprecated: use sweeper.Sweepable.
type Sweepable = sweeper.Sweepable

// SweeperOptions configure a Sweeper.
//
// Deprecated: use sweeper.Options.
type SweeperOptions = sweeper.Options

// Sweeper deletes expired records of a store in the background.
//
// Deprecated: use sweeper.Sweeper.
type Sweeper = sweeper.Sweeper

// StartSweeper starts sweeping st.
//
// Deprecated: use sweeper.Start.
func StartSweeper(st Sweepable, opt SweeperOptions) (*Sweeper, error) {
	return sweeper.Start(st, opt)
}

// Sweep deletes records of st that expired before now, in batches.
//
// Deprecated: use sweeper.Sweep.
func Sweep(ctx context.Context, st Sweepable, now time.Time, batch, maxBatches int, timeout time.Duration) (int, error) {
	return sweeper.Sweep(ctx, st, now, batch, maxBatches, timeout)
}
