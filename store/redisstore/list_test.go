package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// The index of records deleted by their storage TTL is trimmed by later claims: after
// several generations of short-lived records in one shard, its index holds about the live
// records and a fraction more, not every record ever written. A listing that meets the gone
// ones removes them.
func TestIndexTrimmedAfterTTL(t *testing.T) {
	t.Parallel()
	for name, rdb := range map[string]redis.UniversalClient{"standalone": standalone(t), "cluster": cluster(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := newStoreWith(t, redisstore.Options{Client: rdb, TTLMargin: time.Millisecond})
			ctx := context.Background()
			fp := idem.Fingerprint([]byte("x"))
			const gen, perGen = 5, 200
			// Keys of one shard, so that its index meets every generation; an anchor record
			// that lives for an hour keeps the index itself alive meanwhile.
			var keys []string
			for i := 0; len(keys) < gen*perGen+1; i++ {
				if k := fmt.Sprintf("k%d", i); redisstore.Shard(k) == 7 {
					keys = append(keys, k)
				}
			}
			anchor, keys := keys[0], keys[1:]
			if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: anchor, Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			ik := redisstore.IndexKey(st, anchor)
			for g := range gen {
				if g > 0 {
					time.Sleep(150 * time.Millisecond) // the previous generation is gone
				}
				for _, k := range keys[g*perGen : (g+1)*perGen] {
					if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: time.Now(), Lease: 10 * time.Millisecond, TTL: 100 * time.Millisecond}); err != nil {
						t.Fatal(err)
					}
				}
			}
			n := rdb.ZCard(ctx, ik).Val()
			t.Logf("index members after %d generations of %d records, the last one live: %d", gen, perGen, n)
			if n > 1+2*perGen {
				t.Errorf("index holds %d members after %d generations of %d short-lived records; not trimmed", n, gen, perGen)
			}
			time.Sleep(150 * time.Millisecond)
			page, err := st.List(ctx, idem.ListQuery{Limit: idem.MaxListLimit})
			if err != nil || len(page.Records) != 1 || page.Records[0].Key != anchor || page.Next != "" {
				t.Fatalf("List after every other record expired = %+v, %v; want the anchor alone", page, err)
			}
			if n := rdb.ZCard(ctx, ik).Val(); n != 1 {
				t.Errorf("index holds %d members after a listing met every record but one gone", n)
			}
		})
	}
}

// A record deleted behind the store's back (by its TTL, or here by a DEL) is not listed, and
// its member leaves the index; Delete and Sweep remove the member with the record; the index
// lives at least as long as its records.
func TestIndexFollowsRecords(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	st := newStore(t, rdb)
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	now := time.Now()
	for _, k := range []string{"a", "b", "d"} {
		if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if ttl, rttl := rdb.PTTL(ctx, redisstore.IndexKey(st, "a")).Val(), rdb.PTTL(ctx, redisstore.RecordKey(st, "a")).Val(); ttl < rttl {
		t.Errorf("index TTL %v shorter than its record's %v", ttl, rttl)
	}
	member := func(k string) bool {
		return rdb.ZScore(ctx, redisstore.IndexKey(st, k), k).Err() == nil
	}
	rdb.Del(ctx, redisstore.RecordKey(st, "a"))
	if err := st.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if member("b") {
		t.Error("Delete left the record's index member")
	}
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "c", Fingerprint: fp, Now: now.Add(-2 * time.Hour), Lease: time.Minute, TTL: time.Hour}) // expired at once
	if err != nil || !res.Claimed || !member("c") {
		t.Fatalf("Reserve(c) = %+v, %v; indexed %v", res, err, member("c"))
	}
	if n, err := st.Sweep(ctx, now, 10); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want the one expired record", n, err)
	}
	if member("c") {
		t.Error("Sweep left the record's index member")
	}
	page, err := st.List(ctx, idem.ListQuery{})
	if err != nil || len(page.Records) != 1 || page.Records[0].Key != "d" {
		t.Fatalf("List = %+v, %v; want d alone", page, err)
	}
	if member("a") {
		t.Error("List met a's record gone but left its index member")
	}
	// Extend past the window moves the record's TTL; the index's covers it.
	res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "e", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Extend(ctx, "e", res.Record.Token, now.Add(72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if ttl, rttl := rdb.PTTL(ctx, redisstore.IndexKey(st, "e")).Val(), rdb.PTTL(ctx, redisstore.RecordKey(st, "e")).Val(); ttl < rttl {
		t.Errorf("after Extend, index TTL %v shorter than its record's %v", ttl, rttl)
	}
}

// A record whose fingerprint (and route) end past the first bytes List reads is listed with
// its route and its response's status all the same (a second read).
func TestListLongFingerprint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fp    int
		route string
	}{
		{"LongFingerprint", 2000, ""},
		{"LongFingerprintAndRoute", 2000, "POST /v1/orders/{id}"},
		{"CutWithinTheRoute", 400, strings.Repeat("\u00e9", idem.MaxRouteLen/2)},
		{"EndsNearTheFirstRead", 512 - 110, "POST /x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t, standalone(t))
			ctx := context.Background()
			now := time.Now()
			fp := strings.Repeat("f", tc.fp)
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Route: tc.route, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 207, Body: []byte("body")}, now, now.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			page, err := st.List(ctx, idem.ListQuery{})
			if err != nil || len(page.Records) != 1 {
				t.Fatalf("List = %+v, %v", page, err)
			}
			r := page.Records[0]
			if r.Fingerprint != fp || r.Route != tc.route || r.Response == nil || r.Response.Status != 207 || r.Response.Body != nil {
				t.Errorf("listed %q: fingerprint of %d bytes, route %q, response %+v", r.Key, len(r.Fingerprint), r.Route, r.Response)
			}
		})
	}
}
