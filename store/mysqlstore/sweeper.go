package mysqlstore

import "github.com/idemkit/idem/store/sweeper"

// Sweeper deletes expired records in the background; see sweeper.Sweeper.
type Sweeper = sweeper.Sweeper

// SweeperOptions configure a Sweeper; see sweeper.Options.
type SweeperOptions = sweeper.Options

// StartSweeper starts deleting s's expired records every opt.Interval (default 1m, with
// jitter), opt.Batch rows (default 1000) per statement, until Stop. It is sweeper.Start for a
// *Store.
func StartSweeper(s *Store, opt SweeperOptions) (*Sweeper, error) {
	if s == nil {
		return nil, invalid("store is nil")
	}
	return sweeper.Start(s, opt)
}
