package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
)

// TestReplayLocksNothing: the replay of a completed, live record is a plain read. A claim
// statement that locked the row (FOR SHARE, or ON CONFLICT's lock) would stamp the row's xmax
// with its transaction id, and give every replay a WAL record and a commit to flush; the row
// of a replayed key keeps xmax 0. Both layouts.
func TestReplayLocksNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  pgstore.Options
	}{{"plain", pgstore.Options{}}, {"partitioned", pgstore.Options{PartitionWidth: time.Hour}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t, tc.opt)
			ctx := context.Background()
			fp := idem.Fingerprint([]byte("replay"))
			now := time.Now()
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !res.Claimed {
				t.Fatal(res, err)
			}
			if err := st.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 201, Body: []byte("once")}, now, now.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			xmax := func() string {
				var x string
				if err := st.Pool().QueryRow(ctx, `SELECT xmax::text FROM `+st.Table()+` WHERE key = 'k'`).Scan(&x); err != nil {
					t.Fatal(err)
				}
				return x
			}
			if x := xmax(); x != "0" {
				t.Fatalf("xmax after Complete = %s, want 0", x)
			}
			for i := range 3 {
				rep, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now.Add(time.Duration(i+1) * time.Second), Lease: time.Minute, TTL: time.Hour})
				if err != nil || rep.Claimed || string(rep.Record.Response.Body) != "once" {
					t.Fatalf("replay = %+v, %v", rep, err)
				}
				// Another fingerprint gets the record too (the engine's mismatch), without a lock.
				if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: idem.Fingerprint([]byte("other")), Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil {
					t.Fatal(err)
				}
			}
			if x := xmax(); x != "0" {
				t.Fatalf("xmax after replays = %s: a replay locked the row", x)
			}
			// An in-progress duplicate still locks the row it returns (the contract's latest
			// version), so the check above can fail.
			res2, err := st.Reserve(ctx, idem.ReserveRequest{Key: "p", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !res2.Claimed {
				t.Fatal(res2, err)
			}
			if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "p", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			var x string
			if err := st.Pool().QueryRow(ctx, `SELECT xmax::text FROM `+st.Table()+` WHERE key = 'p'`).Scan(&x); err != nil {
				t.Fatal(err)
			}
			if x == "0" {
				t.Fatalf("a duplicate of a claim in progress left xmax 0: the probe sees no locks")
			}
		})
	}
}
