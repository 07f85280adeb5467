package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
)

// TestSweepKeepsRowClaimedAgain: a row that Sweep would delete, claimed again by a transaction
// that has not committed yet, is kept after that transaction commits. The sweep locks its
// rows as it finds them (FOR UPDATE SKIP LOCKED, which re-reads a row changed since its
// snapshot); a DELETE that only waited for the row lock would then delete the new claim.
func TestSweepKeepsRowClaimedAgain(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	ctx := context.Background()
	fp := idem.Fingerprint(nil)
	base := time.Now()
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: base, Lease: time.Second, TTL: time.Minute}); err != nil || !res.Claimed {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	now := base.Add(2 * time.Minute) // the claim expired at base+1m
	// Another process claims the key again, in a transaction it has not committed yet.
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE `+st.Table()+` SET expires_at = $2, lease_until = $2 WHERE key = $1`,
		"k", now.Add(time.Hour).UnixMicro()); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int
		err error
	}
	swept := make(chan result, 1)
	go func() {
		n, err := st.Sweep(ctx, now, 100)
		swept <- result{n, err}
	}()
	// Commit once the sweep has either finished or is waiting for the row's lock.
	var done *result
	for deadline := time.Now().Add(10 * time.Second); done == nil; {
		select {
		case r := <-swept:
			done = &r
			continue
		default:
		}
		var waiting bool
		if err := st.Pool().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM %' AND position($1 in query) > 0)`,
			strings.Trim(st.Table()[strings.LastIndexByte(st.Table(), '.')+1:], `"`)).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Sweep neither finished nor waited for the locked row within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if done == nil {
		r := <-swept
		done = &r
	}
	if done.err != nil {
		t.Fatal(done.err)
	}
	rec, err := st.Get(ctx, "k")
	if errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Sweep deleted a row claimed again while it ran (it deleted %d)", done.n)
	}
	if err != nil || !rec.ExpiresAt.After(now) {
		t.Fatalf("row after Sweep = %+v, %v; want the new claim", rec, err)
	}
}
