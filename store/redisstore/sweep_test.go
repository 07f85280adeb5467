package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// countKeys returns how many keys match the glob pattern, on every master.
func countKeys(t *testing.T, rdb redis.UniversalClient, pattern string) int {
	t.Helper()
	ctx := context.Background()
	var n atomic.Int64
	count := func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, pattern).Result()
		n.Add(int64(len(keys)))
		return err
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, count)
	case *redis.Client:
		err = count(ctx, c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return int(n.Load())
}

// TestSweepScan: Sweep finds expired records in every shard and on every master by scanning,
// deletes them in batches of at most batch, keeps live ones, counts only its own deletions
// (not records Redis deleted by itself) and never touches keys of a store whose prefix differs
// only by glob characters. Writes leave one Redis key per record: no index on the hot path.
func TestSweepScan(t *testing.T) {
	t.Parallel()
	for _, target := range []struct {
		name string
		rdb  func(t *testing.T) redis.UniversalClient
	}{{"standalone", func(t *testing.T) redis.UniversalClient { return standalone(t) }},
		{"cluster", func(t *testing.T) redis.UniversalClient { return cluster(t) }}} {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			rdb := target.rdb(t)
			ctx := context.Background()
			base := fmt.Sprintf("idemtest:%08x", rand.Uint32())
			mk := func(prefix string) *redisstore.Store {
				st, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			// "*" in the swept store's prefix must not match the other store's "x".
			st, other := mk(base+"*:"), mk(base+"x:")
			t.Cleanup(func() { dropPrefix(t, rdb, base) })
			now := time.Now()
			fp := idem.Fingerprint(nil)
			const n, live, gone = 300, 40, 50
			write := func(st *redisstore.Store, k string, window time.Duration) {
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				if err := st.Complete(ctx, k, res.Record.Token, idem.Response{Status: 200}, now, now.Add(window)); err != nil {
					t.Fatal(err)
				}
			}
			for i := range n {
				window := time.Minute
				if i >= n-live {
					window = time.Hour
				}
				write(st, "k"+strconv.Itoa(i), window)
				write(other, "k"+strconv.Itoa(i), time.Minute)
			}
			if got := countKeys(t, rdb, base+`\*:{???}r:*`); got != n {
				t.Fatalf("%d records left %d Redis keys, want one each", n, got)
			}
			// Redis "expired" some of them by itself.
			for i := range gone {
				if err := rdb.Del(ctx, redisstore.RecordKey(st, "k"+strconv.Itoa(i))).Err(); err != nil {
					t.Fatal(err)
				}
			}
			const batch = 64
			total, calls := 0, 0
			for {
				got, err := st.Sweep(ctx, now.Add(2*time.Minute), batch)
				if err != nil {
					t.Fatal(err)
				}
				if got > batch {
					t.Fatalf("Sweep deleted %d, more than its batch", got)
				}
				total += got
				if calls++; got < batch {
					break
				}
			}
			if want := n - live - gone; total != want {
				t.Errorf("swept %d records in %d calls, want %d", total, calls, want)
			}
			if got := countKeys(t, rdb, base+`\*:{???}r:*`); got != live {
				t.Errorf("%d keys left, want the %d live records", got, live)
			}
			for i := n - live; i < n; i++ {
				if _, err := st.Get(ctx, "k"+strconv.Itoa(i)); err != nil {
					t.Fatalf("live record k%d: %v", i, err)
				}
			}
			// The listing, through the index, finds the live records alone.
			if page, err := st.List(ctx, idem.ListQuery{Limit: n}); err != nil || len(page.Records) != live {
				t.Errorf("List after the sweep: %d records, %v; want the %d live ones", len(page.Records), err, live)
			}
			if got := countKeys(t, rdb, base+"x:{???}r:*"); got != n {
				t.Errorf("the other store holds %d keys after the sweep, want its %d", got, n)
			}
		})
	}
}
