package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// newestKeys lists every record of st newest first, a few a page, and returns their keys.
func newestKeys(t *testing.T, st *redisstore.Store) []string {
	t.Helper()
	var keys []string
	q := idem.ListQuery{Order: idem.ListNewestFirst, Limit: 7}
	for range 100 {
		page, err := st.List(context.Background(), q)
		if err != nil {
			t.Fatalf("List newest first: %v", err)
		}
		for _, r := range page.Records {
			keys = append(keys, r.Key)
		}
		if page.Next == "" {
			return keys
		}
		q.Cursor = page.Next
	}
	t.Fatal("List newest first: more than 100 pages")
	return nil
}

// Records written by a version of the store without time indexes (here: their time indexes
// deleted) are listed newest first all the same: a Store adds them to the time index before
// its first newest-first page, on standalone Redis and on Redis Cluster.
func TestNewestFirstBackfillsRecordsWithoutTimeIndex(t *testing.T) {
	t.Parallel()
	for name, rdb := range map[string]redis.UniversalClient{"standalone": standalone(t), "cluster": cluster(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			old := newStore(t, rdb)
			ctx := context.Background()
			fp := idem.Fingerprint([]byte("x"))
			base := time.Now().Truncate(time.Millisecond)
			var want []string
			for i := range 40 {
				k := fmt.Sprintf("old/%02d", 39-i) // key order is not creation order
				res, err := old.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: base.Add(time.Duration(i) * time.Millisecond), Lease: time.Minute, TTL: time.Hour})
				if err != nil || !res.Claimed {
					t.Fatalf("Reserve(%q) = %+v, %v", k, res, err)
				}
				if i%2 == 0 {
					if err := old.Complete(ctx, k, res.Record.Token, idem.Response{Status: 201}, base, base.Add(time.Hour)); err != nil {
						t.Fatal(err)
					}
				}
				want = append(want, k)
			}
			slices.Reverse(want)
			for sh := range redisstore.Shards {
				if err := rdb.Del(ctx, redisstore.TimeKeyOf(old, sh)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// The store that wrote them also listed nothing newest first yet: a new one, as a
			// process started after an upgrade.
			st, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: redisstore.PrefixOf(old)})
			if err != nil {
				t.Fatal(err)
			}
			if got := newestKeys(t, st); !slices.Equal(got, want) {
				t.Errorf("newest first after an upgrade:\n got %q\nwant %q", got, want)
			}
			// A record claimed afterwards comes first, and the index is not backfilled twice.
			if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "new", Fingerprint: fp, Now: base.Add(time.Second), Lease: time.Minute, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if got := newestKeys(t, st); len(got) != len(want)+1 || got[0] != "new" {
				t.Errorf("newest first after a new claim: %q", got)
			}
		})
	}
}

// A record claimed anew after it expired (a new created_at) is listed once, where its new
// creation time puts it, whether the claim found the old record (the reserve script moves its
// member) or Redis had deleted it by its TTL (List meets the old member and removes it).
func TestNewestFirstReclaimedRecordListedOnce(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	st := newStore(t, rdb)
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	base := time.Now().Truncate(time.Millisecond)
	claim := func(k string, at time.Time, ttl time.Duration) {
		t.Helper()
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: at, Lease: time.Millisecond, TTL: ttl})
		if err != nil || !res.Claimed || !res.Record.CreatedAt.Equal(at) {
			t.Fatalf("Reserve(%q) = %+v, %v", k, res, err)
		}
	}
	claim("expired", base, time.Millisecond) // expired, still stored
	claim("deleted", base.Add(time.Millisecond), time.Hour)
	claim("other", base.Add(2*time.Millisecond), time.Hour)
	claim("expired", base.Add(3*time.Millisecond), time.Hour) // claimed anew: a new created_at
	if ms := timeMembers(t, rdb, st, "expired"); len(ms) != 1 {
		t.Errorf("time index members of the reclaimed record: %q; want its new one alone", ms)
	}
	// "deleted" deleted behind the store's back (as by its TTL), then claimed anew; its old
	// member left behind (the claim's trim may have removed it: put it back, as when the
	// trim's random picks miss it).
	old := timeMembers(t, rdb, st, "deleted")
	rdb.Del(ctx, redisstore.RecordKey(st, "deleted"))
	claim("deleted", base.Add(4*time.Millisecond), time.Hour)
	rdb.ZAdd(ctx, redisstore.TimeKey(st, "deleted"), redis.Z{Member: old[0]})
	want := []string{"deleted", "expired", "other"}
	if got := newestKeys(t, st); !slices.Equal(got, want) {
		t.Errorf("newest first = %q, want %q", got, want)
	}
	if ms := timeMembers(t, rdb, st, "deleted"); len(ms) != 1 {
		t.Errorf("after List met the stale member, the record's time index members are %q; want one", ms)
	}
	// Delete and Sweep take the member with the record.
	if err := st.Delete(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	claim("swept", base.Add(5*time.Millisecond), time.Millisecond)
	if n, err := st.Sweep(ctx, base.Add(time.Second), 10); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v", n, err)
	}
	for _, k := range []string{"other", "swept"} {
		if ms := timeMembers(t, rdb, st, k); len(ms) != 0 {
			t.Errorf("time index still holds %q after its record was deleted", ms)
		}
	}
	if got := newestKeys(t, st); !slices.Equal(got, []string{"deleted", "expired"}) {
		t.Errorf("newest first after Delete and Sweep = %q", got)
	}
}

// timeMembers returns the members of key's shard's time index that are key's.
func timeMembers(t *testing.T, rdb redis.UniversalClient, st *redisstore.Store, key string) []string {
	t.Helper()
	ms, err := rdb.ZRange(context.Background(), redisstore.TimeKey(st, key), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for _, m := range ms {
		if len(m) > 16 && m[16:] == key {
			mine = append(mine, m)
		}
	}
	return mine
}
