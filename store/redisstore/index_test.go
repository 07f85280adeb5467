package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// keysInShard returns n keys that all fall in shard sh.
func keysInShard(sh, n int, prefix string) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := prefix + strconv.Itoa(i); redisstore.Shard(k) == sh {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestIndexTrimmedByClaims: without any Sweep, claims drop the index entries of records whose
// storage TTL ran out, so the index does not grow without bound.
func TestIndexTrimmedByClaims(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	st := newStore(t, rdb)
	ctx := context.Background()
	const sh = 7
	idx := redisstore.IndexKey(st, sh)
	old := float64(time.Now().Add(-time.Hour).UnixMicro())
	stale := make([]redis.Z, 100)
	for i := range stale {
		stale[i] = redis.Z{Score: old, Member: "gone-" + strconv.Itoa(i)}
	}
	if err := rdb.ZAdd(ctx, idx, stale...).Err(); err != nil {
		t.Fatal(err)
	}
	fp := idem.Fingerprint(nil)
	live := keysInShard(sh, 200, "live-")
	for _, k := range live {
		if _, err := st.Reserve(ctx, k, fp, time.Now(), time.Minute, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.ZCard(ctx, idx).Val(); n != int64(len(live)) {
		t.Errorf("index holds %d entries after %d claims, want only the %d live ones", n, len(live), len(live))
	}
}

// TestSweepDropsGoneEntries: index entries whose record Redis already deleted are dropped by
// Sweep and not counted as deletions; expired records in many shards are all swept.
func TestSweepDropsGoneEntries(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	st := newStore(t, rdb)
	ctx := context.Background()
	now := time.Now()
	fp := idem.Fingerprint(nil)
	const n = 300 // spread over many shards
	for i := range n {
		k := "k" + strconv.Itoa(i)
		res, err := st.Reserve(ctx, k, fp, now, time.Minute, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Complete(ctx, k, res.Record.Token, idem.Response{Status: 200}, now, now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	// Redis "expired" 50 of them by itself.
	for i := range 50 {
		if err := rdb.Del(ctx, redisstore.RecordKey(st, "k"+strconv.Itoa(i))).Err(); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for {
		got, err := st.Sweep(ctx, now.Add(2*time.Minute), 64)
		if err != nil {
			t.Fatal(err)
		}
		if got > 64 {
			t.Fatalf("Sweep deleted %d, more than its batch", got)
		}
		total += got
		if got < 64 {
			break
		}
	}
	if total != n-50 {
		t.Errorf("swept %d records, want %d", total, n-50)
	}
	for sh := range redisstore.Shards {
		if c := rdb.ZCard(ctx, redisstore.IndexKey(st, sh)).Val(); c != 0 {
			t.Fatalf("shard %d index still holds %d entries", sh, c)
		}
	}
}
