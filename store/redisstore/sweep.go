package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// sweepPage is the COUNT of each SCAN of Sweep: how many keys one page looks at.
const sweepPage = 1000

// Sweep implements idem.Store: it deletes at most batch records whose expires_at is at or
// before now.
//
// Records are not indexed by expiry (that would cost a write on every call of the hot path):
// Sweep walks the key space with SCAN MATCH <Prefix>{???}r:* on every master, reads the
// expires_at of each page's records with one pipelined GETRANGE of their first bytes per page, and deletes the expired
// ones (and their index members) with one pipelined script per page that re-checks expires_at
// before deleting, so a record claimed again in between is kept. A call stops as soon as it has deleted batch
// records, and the next call resumes each node's SCAN at the page where it stopped; a call
// that returns fewer than batch has walked every node's key space to its end. Its cost is in
// proportion to the number of keys in Redis, not of expired records.
//
// Sweeping is optional with Redis: every record carries a storage TTL, so Redis deletes it
// TTLMargin after it expires anyway. Sweep deletes expired records sooner.
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	if err := s.ready(ctx); err != nil || batch <= 0 {
		return 0, err
	}
	now = now.Truncate(time.Microsecond)
	sw := &sweeper{s: s, now: micros(now), nowMicros: now.UnixMicro(), budget: batch,
		match: globEscape(s.opt.Prefix) + "{???}r:*"}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, sw.node)
	case *redis.Ring:
		err = c.ForEachShard(ctx, sw.node)
	case *redis.Client:
		err = sw.node(ctx, c)
	default:
		err = sw.scan(ctx, "", s.rdb)
	}
	return sw.deleted, wrap("sweep", err)
}

// sweeper is one Sweep call; its node method runs concurrently for the masters of a cluster.
type sweeper struct {
	s         *Store
	now       string // Unix microseconds, as the script takes it
	nowMicros int64
	match     string
	mu        sync.Mutex
	budget    int // deletions this call may still make, less those in flight
	// deleted is how many records this call deleted.
	deleted int
}

func (sw *sweeper) node(ctx context.Context, c *redis.Client) error {
	return sw.scan(ctx, c.Options().Addr, c)
}

// scan sweeps the keys of one node, from the cursor where the previous call stopped.
func (sw *sweeper) scan(ctx context.Context, addr string, c redis.Cmdable) error {
	s := sw.s
	s.sweepMu.Lock()
	cursor := s.cursors[addr]
	s.sweepMu.Unlock()
	for {
		keys, next, err := c.Scan(ctx, cursor, sw.match, sweepPage).Result()
		if err != nil {
			return err
		}
		done, err := sw.page(ctx, keys)
		switch {
		case err != nil:
			return err
		case !done:
			// Out of budget within this page: the next call rescans it (the keys deleted
			// from it are gone by then).
			s.setCursor(addr, cursor)
			return nil
		case next == 0 || sw.left() == 0:
			s.setCursor(addr, next)
			return nil
		}
		cursor = next
	}
}

// page deletes the expired records among keys, as far as the budget allows. It reports
// whether it looked at all of them.
func (sw *sweeper) page(ctx context.Context, keys []string) (bool, error) {
	if len(keys) == 0 {
		return true, nil
	}
	s := sw.s
	exps := make([]*redis.StringCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			exps[i] = p.GetRange(ctx, k, 0, 127) // the fields before the fingerprint
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	var expired []string
	for i, c := range exps {
		// A key gone since SCAN saw it answers ""; a value that is not a record is left to
		// its storage TTL.
		if e, ok := expiresAt(c.Val()); c.Err() == nil && ok && e <= sw.nowMicros {
			expired = append(expired, keys[i])
		}
	}
	// A candidate claimed again since GETRANGE read it is kept, and its deletion goes back to
	// the budget for the next candidates: a call returns fewer than batch only once it has
	// walked the key space, never because some of a page's candidates were claimed again.
	for len(expired) > 0 {
		take := sw.take(len(expired))
		if take == 0 {
			return false, nil
		}
		dels := make([]*redis.Cmd, take)
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range expired[:take] {
				// k is <prefix>{sss}r:<key>; its indexes are <prefix>{sss}i and …t.
				pre := k[:len(s.opt.Prefix)+len("{sss}")]
				dels[i] = sweepScript.Eval(ctx, p, []string{k, pre + "i", pre + "t"}, sw.now, s.base())
			}
			return nil
		})
		n := 0
		for _, d := range dels {
			if v, e := d.Int(); e == nil && v == 1 {
				n++
			}
		}
		sw.give(take, n)
		if err != nil {
			return false, err
		}
		expired = expired[take:]
	}
	return true, nil
}

// expiresAt reads the expires_at field of a stored record from its first bytes.
func expiresAt(head string) (int64, bool) {
	for range 6 {
		var ok bool
		if _, head, ok = strings.Cut(head, "|"); !ok {
			return 0, false
		}
	}
	f, _, ok := strings.Cut(head, "|")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(f, 10, 64)
	return n, err == nil
}

// take reserves up to n deletions from the budget.
func (sw *sweeper) take(n int) int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	n = min(n, sw.budget)
	sw.budget -= n
	return n
}

// give settles a take: n of the took deletions happened, the rest go back to the budget.
func (sw *sweeper) give(took, n int) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.budget += took - n
	sw.deleted += n
}

func (sw *sweeper) left() int {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.budget
}

func (s *Store) setCursor(addr string, cursor uint64) {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if s.cursors == nil {
		s.cursors = map[string]uint64{}
	}
	s.cursors[addr] = cursor
}

// globEscape quotes the characters SCAN MATCH treats as special.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// SelfExpiring implements idem.SelfExpiring: it reports true, since every record carries a
// storage TTL (its own TTL plus TTLMargin) and Redis deletes it by itself. Sweep is optional.
func (s *Store) SelfExpiring() bool { return true }
