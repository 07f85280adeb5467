// Package sweeper deletes expired records of any idem.Store in the background.
//
// Records past their expires_at count as absent at once (the engine compares expires_at itself), but a store
// keeps them until something deletes them. A Sweeper calls the store's Sweep in bounded
// batches every Interval, with jitter so that many processes sharing a store do not sweep in
// step, until a batch comes back short or MaxBatches ran. Stop ends it and waits for it; no
// goroutine outlives Stop.
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
