package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/shardmerge"
	"github.com/idemkit/idem/store/storekit"
)

var _ idem.Lister = (*Store)(nil)

// listHead is how many bytes of a record List reads first: every field before the
// fingerprint, a fingerprint of up to a few hundred bytes and the head of the response.
const listHead = 512

// List returns a page of records in key order or newest first (idem.Lister), for operators,
// through the store's indexes: never KEYS or a SCAN of the key space.
//
// Every shard (Shards of them) keeps the keys of its records in a sorted set that the scripts
// update with the records themselves (see scripts.go), so a key prefix and a cursor are a
// range of each. A page reads the first keys of that range from every shard's index (one
// pipelined ZRANGE … BYLEX per shard, a few keys each), merges them in key order, and reads
// the head of each candidate record (one pipelined GETRANGE of its first bytes, never a
// stored body), reading more keys from a shard only when the merge has used up what it read
// of it; the state and age filters are checked record by record. An unfiltered page
// therefore costs two round trips plus, rarely, one more per shard whose keys it used up,
// and Shards small ZRANGEs whatever the page size. On Redis Cluster the pipelines go to every
// master at once.
//
// Newest first, a page reads every shard's time index the same way, from the newest member
// down (ZRANGE … BYLEX REV: a member is the creation time, zero-padded, then the key, so a
// time range and a cursor are a range of members), merges them in descending order, and
// checks each record's creation time against its member's. The key prefix, like the other
// filters, is checked record by record. Creation times must be below 10^16 µs (the year 2286).
// Before its first newest-first page, a Store compares the sizes of every shard's two
// indexes (one pipelined ZCARD pair per shard) and adds to the time index the records of a
// shard whose time index is the smaller, which only a version of the store without time
// indexes leaves behind; each Store does this until a look finds none to add.
//
// A key whose record Redis has deleted by its TTL is skipped, and its member removed from the
// index by a script that first checks the record is still gone (for the time index: gone, or
// created at another time). Records written by a version of the store without the index are
// listed once a later Complete or claim rewrites them.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.ListPage, error) {
	b, err := storekit.Bounds(q)
	if err != nil {
		return idem.ListPage{}, err
	}
	if err := s.ready(ctx); err != nil {
		return idem.ListPage{}, err
	}
	l := &lister{s: s, page: shardmerge.NewPage(b), newest: b.Newest}
	if b.Newest {
		if err := s.backfill(ctx); err != nil {
			return idem.ListPage{}, wrap("list", err)
		}
		// Members from the newest down: before the cursor's (time, key) and CreatedBefore,
		// at or after CreatedSince.
		l.start, l.stop = "+", "-"
		if b.CreatedBefore != 0 {
			l.start = "(" + timeMember(b.CreatedBefore, "")
		}
		if b.HasAfter && (b.CreatedBefore == 0 || b.AfterCreated < b.CreatedBefore) {
			l.start = "(" + timeMember(b.AfterCreated, b.After)
		}
		if b.HasSince {
			l.stop = "[" + timeMember(b.CreatedSince, "")
		}
		if err := l.run(ctx); err != nil {
			return idem.ListPage{}, wrap("list", err)
		}
		return l.page.Result(), nil
	}
	l.start, l.stop = "-", "+"
	if b.From != "" {
		l.start = "[" + b.From
	}
	if b.HasAfter && b.After >= b.From {
		l.start = "(" + b.After
	}
	if b.To != "" {
		l.stop = "(" + b.To
		if b.HasAfter && b.After >= b.To {
			return idem.ListPage{}, nil
		}
	}
	if err := l.run(ctx); err != nil {
		return idem.ListPage{}, wrap("list", err)
	}
	return l.page.Result(), nil
}

// timeMember returns the time index member of the record of key created at created (Unix
// microseconds): 16 decimal digits, then the key (see scripts.go).
func timeMember(created int64, key string) string {
	return fmt.Sprintf("%016d", max(created, 0)) + key
}

// lister is one List call: a k-way merge of the shards' index ranges.
type lister struct {
	s           *Store
	page        *shardmerge.Page
	newest      bool   // read the time indexes, from the newest member down
	start, stop string // the range of every index, as ZRANGE BYLEX bounds (REV: start is the max)
	shards      []shardRange
	merge       *shardmerge.Merge
	gone        []string // keys whose record is gone, to remove from the index
	stale       []string // time index members whose record is gone or newer, to remove
}

// shardRange is where a List call stands in one shard's index range.
type shardRange struct {
	last string // the last key read, where the next read starts (after it)
	n    int    // how many keys the next read asks for
}

func (l *lister) run(ctx context.Context) error {
	l.shards = make([]shardRange, Shards)
	l.merge = shardmerge.New(Shards)
	if l.newest {
		l.merge = shardmerge.NewDescending(Shards)
	}
	// Enough keys per shard that, keys being spread evenly, a page rarely uses up a shard's.
	per := 2*l.page.Need/Shards + 2
	for i := range l.shards {
		l.shards[i].n = per
	}
	if err := l.merge.Run(ctx, l.page.Want, l.read, l.check); err != nil {
		return err
	}
	return l.unindex(ctx)
}

// read reads the next keys of the given shards' ranges, in one pipeline.
func (l *lister) read(ctx context.Context, shards []int) error {
	s := l.s
	cmds := make([]*redis.StringSliceCmd, len(shards))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sh := range shards {
			r := &l.shards[sh]
			start := l.start
			if r.last != "" {
				start = "(" + r.last
			}
			key := s.indexKey(sh)
			if l.newest {
				key = s.timeKey(sh)
			}
			cmds[i] = p.ZRangeArgs(ctx, redis.ZRangeArgs{Key: key, Start: start, Stop: l.stop, ByLex: true, Rev: l.newest, Count: int64(r.n)})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, sh := range shards {
		r := &l.shards[sh]
		keys := cmds[i].Val()
		if len(keys) > 0 {
			r.last = keys[len(keys)-1]
		}
		more := len(keys) == r.n // a short read reached the range's end
		r.n = min(2*r.n, l.page.Need)
		l.merge.Add(sh, keys, more)
	}
	return nil
}

// check reads the head of each record of keys (in key order; newest first, time index
// members) and keeps those that match.
func (l *lister) check(ctx context.Context, keys []string) error {
	s := l.s
	var members []string
	if l.newest {
		members, keys = keys, make([]string, len(keys))
		for i, m := range members {
			keys[i] = m[min(len(m), 16):]
		}
	}
	heads := make([]*redis.StringCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			heads[i] = p.GetRange(ctx, s.recordKey(shard(k), k), 0, listHead-1)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, k := range keys {
		v := heads[i].Val()
		if v == "" {
			l.forget(members, i, k) // deleted by its TTL, or by Delete since the ZRANGE
			continue
		}
		rec, more, err := decodeHead(k, v, len(v) < listHead)
		if more > 0 {
			// A long fingerprint: read as far as the response's head.
			v, err = s.rdb.GetRange(ctx, s.recordKey(shard(k), k), 0, int64(more-1)).Result()
			if err != nil {
				return err
			}
			if v == "" {
				l.forget(members, i, k)
				continue
			}
			rec, _, err = decodeHead(k, v, true)
		}
		if err != nil {
			return err
		}
		if l.newest && timeMember(rec.CreatedAt.UnixMicro(), k) != members[i] {
			// The record was claimed anew (or Redis deleted it and it was claimed again)
			// since this member was written: its own member lists it where it belongs.
			l.stale = append(l.stale, members[i])
			continue
		}
		l.page.Keep(k, rec)
	}
	return nil
}

// unindex removes the members of the records found gone, each only if its record is still
// gone (it may have been claimed again since).
func (l *lister) unindex(ctx context.Context) error {
	if len(l.gone) == 0 && len(l.stale) == 0 {
		return nil
	}
	s := l.s
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range l.gone {
			unindexScript.Eval(ctx, p, s.keys(k), s.base())
		}
		for _, m := range l.stale {
			untimeScript.Eval(ctx, p, s.keys(m[16:]), m)
		}
		return nil
	})
	return err
}

// forget notes that the record of key (members[i] newest first) is gone.
func (l *lister) forget(members []string, i int, key string) {
	if l.newest {
		l.stale = append(l.stale, members[i])
		return
	}
	l.gone = append(l.gone, key)
}

// backfill adds to the time index the records of every shard whose time index has fewer
// members than its index: records written by a version of the store without time indexes.
// Once a look finds no such shard left, the Store does not look again.
func (s *Store) backfill(ctx context.Context) error {
	if s.timeIndexed.Load() {
		return nil
	}
	keys, times := make([]*redis.IntCmd, Shards), make([]*redis.IntCmd, Shards)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sh := range Shards {
			keys[sh], times[sh] = p.ZCard(ctx, s.indexKey(sh)), p.ZCard(ctx, s.timeKey(sh))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for sh := range Shards {
		if times[sh].Val() >= keys[sh].Val() {
			continue
		}
		// The shard's keys, a few hundred at a time, each batch one script (one slot).
		for start := "-"; ; {
			members, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.indexKey(sh), Start: start, Stop: "+", ByLex: true, Count: 200}).Result()
			if err != nil {
				return err
			}
			if len(members) == 0 {
				break
			}
			ks := []string{s.indexKey(sh), s.timeKey(sh)}
			for _, k := range members {
				ks = append(ks, s.recordKey(sh, k))
			}
			if err := backfillScript.Run(ctx, s.rdb, ks, s.base()).Err(); err != nil {
				return err
			}
			start = "(" + members[len(members)-1]
		}
	}
	s.timeIndexed.Store(true)
	return nil
}

// decodeHead reads a listed record from the first bytes of its stored value (all of it when
// whole): its fields, its fingerprint and, for a completed record, the head of its response
// (storekit.DecodeResponseHead). When the bytes end before that head and the value is not whole,
// it returns how many bytes it needs instead.
func decodeHead(key, v string, whole bool) (idem.Record, int, error) {
	rec, st, _, rest, fpEnd, err := decodeFields(key, v)
	if errors.Is(err, errShort) && !whole {
		return idem.Record{}, fpEnd + storekit.ListResponseHeadLen, nil // a long fingerprint
	}
	if err != nil {
		return idem.Record{}, 0, err
	}
	rec.State = st
	if st != idem.StateCompleted {
		return rec, 0, nil
	}
	if len(rest) < storekit.ListResponseHeadLen && !whole {
		return idem.Record{}, len(v) - len(rest) + storekit.ListResponseHeadLen, nil
	}
	resp, err := storekit.DecodeResponseHead([]byte(rest[:min(len(rest), storekit.ListResponseHeadLen)]))
	if err != nil {
		return idem.Record{}, 0, fmt.Errorf("record %.80q: %w", key, err)
	}
	rec.Response = &resp
	return rec, 0, nil
}
