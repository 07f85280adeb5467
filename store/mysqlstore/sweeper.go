package mysqlstore

import (
	"context"
	"time"

	"github.com/idemkit/idem/store/internal/storeerr"
	"github.com/idemkit/idem/store/sweeper"
)

// Sweeper deletes expired records in the background; see sweeper.Sweeper.
type Sweeper = sweeper.Sweeper

// SweeperOptions configure a Sweeper; see sweeper.Options.
type SweeperOptions = sweeper.Options

// StartSweeper starts deleting s's expired records, until Stop: a run every opt.Interval
// (default 1m, with jitter) that goes on while batches come back full, at most opt.Batch rows
// (default 1000) per statement, paced to spend at most opt.MaxShare (default 0.1) of the time
// in the database. It is sweeper.Start for a *Store.
func StartSweeper(s *Store, opt SweeperOptions) (*Sweeper, error) {
	if s == nil {
		return nil, invalid("store is nil")
	}
	return sweeper.Start(s, opt)
}

// CountExpired implements sweeper.ExpiredCounter: how many records expired at or before now,
// counting no further than limit, read from the expires_at index. A Sweeper calls it as each
// run begins, for the backlog it reports.
func (s *Store) CountExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	if err := storeerr.CountLimit(ctx, s.ready, "mysqlstore", limit); err != nil {
		return 0, err
	}
	var n int
	err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT 1 FROM "+s.name+" WHERE expires_at <= ? LIMIT ?) AS expired",
		now.UnixMicro(), limit).Scan(&n)
	return n, opErr("count expired", err)
}
