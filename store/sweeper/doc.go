// Package sweeper deletes expired records of any idem.Store in the background, paced so that
// live traffic keeps the store.
//
// Records past their expires_at count as absent at once (the engine compares expires_at
// itself), but a store keeps them until something deletes them. A Sweeper calls the store's
// Sweep in bounded batches. Stop ends it and waits for it; no goroutine outlives Stop.
//
// # Pacing
//
// A Sweeper keeps up with the records that expire and yields to the requests that share the
// store:
//
//   - it runs every Interval (with jitter, so processes sharing a store do not sweep in
//     step) and goes on while batches come back full: a backlog is worked off at once, not one
//     bounded run per Interval;
//   - each batch is one short statement; a batch that takes longer than TargetLatency halves
//     the next, and quick full batches grow it back to Batch (additive increase,
//     multiplicative decrease);
//   - after a call that took d it pauses d×(1−MaxShare)/MaxShare, so it spends at most
//     MaxShare of the wall time (default a tenth) in the store.
//
// Options.OnEvent receives every batch and run: the backlog left (counted by stores that
// implement ExpiredCounter), the rate, the batch durations. Drain is a paced one-off sweep,
// for an operator or a cron job; Sweep an unpaced one.
//
// Stores whose storage deletes expired records by itself (Redis, DynamoDB) say so through
// idem.SelfExpiring; Needed reports whether a store needs a Sweeper at all.
//
//	if sweeper.Needed(st) {
//		sw, err := sweeper.Start(st, sweeper.Options{})
//		if err != nil {
//			return err
//		}
//		defer sw.Stop()
//	}
package sweeper
