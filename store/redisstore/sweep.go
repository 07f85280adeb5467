package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// sweepWindow is how many shards one pipelined look-up of Sweep covers.
const sweepWindow = 128

// Sweep implements idem.Store: it deletes at most batch records whose expires_at is at or
// before now.
//
// Every write of a record also scores its key by expires_at in its shard's expiry index (a
// sorted set in the record's own slot), so Sweep finds expired records without scanning live
// ones. It walks the shards from where the previous call stopped, sweepWindow at a time: one
// pipelined ZRANGEBYSCORE per window (split by node on a cluster), then, for each shard with
// candidates, one script that re-checks each record's expires_at, deletes the expired ones and
// drops index entries whose record Redis already deleted by its storage TTL. A call costs
// Shards/sweepWindow pipelined round trips plus one per shard that has expired records, and
// it stops as soon as it has deleted batch records.
//
// Sweeping is optional with Redis: every record carries a storage TTL, so Redis deletes it
// TTLMargin after it expires anyway. Sweep deletes expired records sooner.
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	if s.closed.Load() {
		return 0, &Error{Op: "sweep", Err: errClosed}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if batch <= 0 {
		return 0, nil
	}
	s.sweepMu.Lock()
	start := s.sweepNext
	s.sweepMu.Unlock()
	nowArg := micros(now.Truncate(time.Microsecond))
	deleted := 0
	for done := 0; done < Shards && deleted < batch; {
		n := min(sweepWindow, Shards-done)
		cmds := make([]*redis.StringSliceCmd, n)
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range n {
				sh := (start + done + i) % Shards
				cmds[i] = p.ZRangeByScore(ctx, s.indexKey(sh), &redis.ZRangeBy{
					Min: "-inf", Max: nowArg, Count: int64(batch - deleted)})
			}
			return nil
		})
		if err != nil {
			return deleted, wrap("sweep", err)
		}
		for i, c := range cmds {
			members := c.Val()
			if len(members) == 0 || deleted >= batch {
				continue
			}
			sh := (start + done + i) % Shards
			members = members[:min(len(members), batch-deleted)]
			keys := make([]string, 1, len(members)+1)
			keys[0] = s.indexKey(sh)
			args := make([]any, 1, len(members)+1)
			args[0] = nowArg
			for _, m := range members {
				keys = append(keys, s.recordKey(sh, m))
				args = append(args, m)
			}
			k, err := sweepScript.Run(ctx, s.rdb, keys, args...).Int()
			if err != nil {
				return deleted, wrap("sweep", err)
			}
			deleted += k
			if deleted >= batch {
				// Start the next call at this shard: it may hold more.
				s.setSweepNext(sh)
				return deleted, nil
			}
		}
		done += n
	}
	s.setSweepNext(start)
	return deleted, nil
}

func (s *Store) setSweepNext(sh int) {
	s.sweepMu.Lock()
	s.sweepNext = sh
	s.sweepMu.Unlock()
}
