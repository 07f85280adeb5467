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
	for i, k := range keys {
		args, err := reserveArgs(idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
		if err != nil {
			panic(err)
		}
		ops[i] = &groupOp{ctx: ctx, key: k, args: args}
	}
	errs := together(s, ops)
	res := make([]idem.Reservation, len(ops))
	for i, op := range ops {
		res[i] = op.res
	}
	return res, errs
}

// CompleteTogether runs completions of keys (with tokens) in one group transaction and
// returns each call's outcome.
func CompleteTogether(ctx context.Context, s *Store, keys []string, tokens []int64, resp idem.Response, now time.Time) []error {
	ops := make([]*groupOp, len(keys))
	for i, k := range keys {
		args := completeArgs(k, tokens[i], resp, now, now.Add(time.Hour))
		ops[i] = &groupOp{ctx: ctx, complete: true, key: k, args: args, size: len(args[2].([]byte))}
	}
	return together(s, ops)
}

func together(s *Store, ops []*groupOp) []error {
	batch := make([]*groupOp, len(ops))
	for i, op := range ops {
		op.done = make(chan struct{})
		batch[i] = op
	}
	for len(batch) > 0 {
		batch = s.group.run(batch)
	}
	errs := make([]error, len(ops))
	for i, op := range ops {
		<-op.done
		errs[i] = op.err
	}
	return errs
}

// ClaimLockSQL returns the statement that takes a key's claim lock ($1) in the partitioned
// layout.
func ClaimLockSQL(s *Store) string { return s.part.lockSQL }

// CompleteThenReserveTogether runs, in one group transaction, the completion of key (with
// token) and a second claim of it, passed to the worker in that order.
func CompleteThenReserveTogether(ctx context.Context, s *Store, key string, token int64, fp string, now time.Time) (idem.Reservation, []error) {
	args, err := reserveArgs(idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil {
		panic(err)
	}
	cargs := completeArgs(key, token, idem.Response{Status: 200}, now, now.Add(time.Hour))
	ops := []*groupOp{
		{ctx: ctx, complete: true, key: key, args: cargs, size: len(cargs[2].([]byte))},
		{ctx: ctx, key: key, args: args},
	}
	errs := together(s, ops)
	return ops[1].res, errs
}
