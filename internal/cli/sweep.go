package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/store/sweeper"
)

func init() {
	register("sweep", "delete expired records now", runSweep)
}

func runSweep(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "sweep", "[--store URL] [--batch N] [--max-share F] [--target-latency D]")
	store := storeFlag(e, fs)
	batch := fs.Int("batch", 1000, "records deleted per statement, at most")
	share := fs.Float64("max-share", 1, "largest fraction of the time spent in the store, above 0 to 1: 0.1 pauses nine times as long as each statement took, leaving the store to live traffic; 1 sweeps without a pause")
	target := fs.Duration("target-latency", 100*time.Millisecond, "a statement that takes longer halves the next batch")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *batch < 1 {
		return usageError("--batch must be at least 1")
	}
	if !(*share > 0 && *share <= 1) {
		return usageError("--max-share must be above 0 and at most 1")
	}
	if *target < time.Millisecond {
		return usageError("--target-latency must be at least 1ms")
	}
	st, err := openStore(ctx, e, *store)
	if err != nil {
		return err
	}
	defer st.Close()
	// Until a batch comes back short: no bound on batches, each bounded by ctx alone.
	r, err := sweeper.Drain(ctx, st, sweeper.Options{Batch: *batch, MaxShare: *share, TargetLatency: *target,
		Timeout: 24 * time.Hour})
	if err != nil {
		return fmt.Errorf("after deleting %d records: %w", r.Deleted, redactError(err, *store))
	}
	fmt.Fprintf(e.stdout, "deleted %d expired records\n", r.Deleted)
	return nil
}
