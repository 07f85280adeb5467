package pgstore

import "github.com/idemkit/idem/store/sqlmigrate"

// Sweeper deletes expired records in the background; see sqlmigrate.Sweeper.
type Sweeper = sqlmigrate.Sweeper

// SweeperOptions configure a Sweeper; see sqlmigrate.SweeperOptions.
type SweeperOptions = sqlmigrate.SweeperOptions

// StartSweeper starts deleting s's expired records every opt.Interval (default 1m, with
// jitter), opt.Batch rows (default 1000) per statement, until Stop.
func StartSweeper(s *Store, opt SweeperOptions) (*Sweeper, error) {
	if s == nil {
		return nil, invalid("store is nil")
	}
	return sqlmigrate.StartSweeper(s, opt)
}
