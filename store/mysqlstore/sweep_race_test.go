package mysqlstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/mysqlstore"
)

// TestSweepKeepsRowClaimedAgain: a row that Sweep would delete, claimed again by a transaction
// that has not committed yet, is kept after that transaction commits. The sweep is one DELETE
// whose WHERE InnoDB evaluates on the row's latest version once it has the row's lock; a sweep
// that picked its keys first and deleted them by key would delete the new claim.
func TestSweepKeepsRowClaimedAgain(t *testing.T) {
	t.Parallel()
	st := newStore(t, mysqlstore.Options{})
	ctx := context.Background()
	fp := idem.Fingerprint(nil)
	base := time.Now()
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: base, Lease: time.Second, TTL: time.Minute}); err != nil || !res.Claimed {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	now := base.Add(2 * time.Minute) // the claim expired at base+1m
	// Another process claims the key again, in a transaction it has not committed yet.
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "UPDATE "+st.Table()+" SET expires_at = ?, lease_until = ? WHERE `key` = ?",
		now.Add(time.Hour).UnixMicro(), now.Add(time.Hour).UnixMicro(), "k"); err != nil {
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
	// Commit once the sweep has finished or its DELETE is running (it then waits for the lock).
	table := strings.Trim(st.Table()[strings.LastIndexByte(st.Table(), '.')+1:], "`")
	var done *result
	for deadline := time.Now().Add(10 * time.Second); done == nil; {
		select {
		case r := <-swept:
			done = &r
			continue
		default:
		}
		var waiting int
		if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM information_schema.PROCESSLIST
			WHERE INFO LIKE 'DELETE FROM %' AND INSTR(INFO, ?) > 0`, table).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Sweep neither finished nor ran its DELETE within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(); err != nil {
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
