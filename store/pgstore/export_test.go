package pgstore

import (
	"context"
	"time"

	"github.com/idemkit/idem"
)

// GroupStats reports what a store's group-commit workers did: transactions, the calls they
// carried, and the most calls one carried.
func GroupStats(s *Store) (transactions, calls, largest int) {
	s.group.stats.mu.Lock()
	defer s.group.stats.mu.Unlock()
	return s.group.stats.transactions, s.group.stats.calls, s.group.stats.largest
}

// ReserveTogether runs claims of keys in one group transaction, as a worker would, and
// returns each call's outcome.
func ReserveTogether(ctx context.Context, s *Store, keys []string, fp string, now time.Time) ([]idem.Reservation, []error) {
	ops := make([]*groupOp, len(keys))
	batch := make([]*groupOp, len(keys))
	for i, k := range keys {
		args, err := reserveArgs(k, fp, now, time.Minute, time.Hour)
		if err != nil {
			panic(err)
		}
		ops[i] = &groupOp{ctx: ctx, key: k, args: args, done: make(chan struct{})}
		batch[i] = ops[i]
	}
	for len(batch) > 0 {
		batch = s.group.run(batch)
	}
	res := make([]idem.Reservation, len(keys))
	errs := make([]error, len(keys))
	for i, op := range ops {
		<-op.done
		res[i], errs[i] = op.res, op.err
	}
	return res, errs
}
