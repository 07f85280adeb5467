package sqlitestore

import (
	"context"
	"time"

	"github.com/idemkit/idem/store/internal/storeerr"
)

// CountExpired implements sweeper.ExpiredCounter: how many records expired at or before now,
// counting no further than limit, read from the expires_at index by a reader (it does not
// hold the write lock). A Sweeper calls it as each run begins, for the backlog it reports.
func (s *Store) CountExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	if err := storeerr.CountLimit(ctx, s.ready, "sqlitestore", limit); err != nil {
		return 0, err
	}
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM "`+s.table+`" WHERE expires_at <= ?1 LIMIT ?2)`,
		now.UnixMicro(), limit).Scan(&n)
	if err != nil {
		return 0, s.fail("count expired", err)
	}
	return n, nil
}
