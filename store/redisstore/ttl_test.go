package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// TestStorageTTL: every write gives the record a storage TTL of its business window plus
// TTLMargin, counted in milliseconds: a 24-hour record lives 24 hours and a margin in Redis,
// never 86 seconds. Each write path is checked: the first claim (SET … PX … NX GET), a claim
// of an expired record (the reserve script), Complete, an Extend beyond the window, and
// Release, which keeps the TTL it found.
func TestStorageTTL(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	const margin = 5 * time.Minute
	st := newStoreWith(t, redisstore.Options{Client: rdb, TTLMargin: margin})
	ctx := context.Background()
	now := time.Now()
	fp := idem.Fingerprint(nil)
	check := func(what, key string, want time.Duration) {
		t.Helper()
		got, err := rdb.PTTL(ctx, redisstore.RecordKey(st, key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		// Time passes between the write and PTTL: a minute of slack is far above that and far
		// below any mistake of unit.
		if got > want || got < want-time.Minute {
			t.Errorf("%s: PTTL %s, want %s (the window plus TTLMargin)", what, got, want)
		}
	}
	claim := func(key string, now time.Time, window time.Duration) idem.Record {
		t.Helper()
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: window})
		if err != nil || !res.Claimed {
			t.Fatalf("Reserve(%q) = %+v, %v", key, res, err)
		}
		return res.Record
	}

	rec := claim("first", now, 24*time.Hour)
	check("first claim", "first", 24*time.Hour+margin)
	if err := st.Complete(ctx, "first", rec.Token, idem.Response{Status: 200}, now, now.Add(48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("Complete", "first", 48*time.Hour+margin)

	// Claimed two hours ago for one hour: expired, so the next Reserve runs the script.
	claim("again", now.Add(-2*time.Hour), time.Hour)
	claim("again", now, 24*time.Hour)
	check("claim of an expired record", "again", 24*time.Hour+margin)

	rec = claim("extended", now, time.Hour)
	if err := st.Extend(ctx, "extended", rec.Token, now.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	check("Extend beyond the window", "extended", 3*time.Hour+margin)
	if err := st.Release(ctx, "extended", rec.Token); err != nil {
		t.Fatal(err)
	}
	check("Release", "extended", 3*time.Hour+margin)
}
