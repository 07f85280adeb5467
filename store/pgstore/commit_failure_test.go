package pgstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
)

// TestDoTxCommitFailureIsNotKept: when PostgreSQL refuses the COMMIT (here a deferred unique
// constraint that the caller's writes violate, checked only at commit), DoTx reports a store
// error and Kept false, never the executed result: nothing was written, no record remains,
// and a retry with the same key executes.
func TestDoTxCommitFailureIsNotKept(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	ctx := context.Background()
	table := pgx.Identifier{testSchema, randomName("deferred_")}.Sanitize()
	if _, err := st.Pool().Exec(ctx, `CREATE TABLE `+table+` (id bigserial PRIMARY KEY, customer text NOT NULL,
		UNIQUE (customer) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = st.Pool().Exec(ctx, `DROP TABLE IF EXISTS `+table) })
	fp := idem.Fingerprint([]byte("deferred"))
	ran := 0
	res, err := st.DoTx(ctx, "commit-fails", fp, func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
		ran++
		// Both inserts succeed; the duplicate is found at COMMIT.
		if _, err := tx.Exec(ctx, `INSERT INTO `+table+` (customer) VALUES ('c1'), ('c1')`); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{Status: 201, Body: []byte("ok")}, nil
	})
	if err == nil || res.Kept || res.Replayed {
		t.Fatalf("a COMMIT that failed: %+v, %v; want a store error, not kept", res, err)
	}
	if !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("a COMMIT that failed: %v, want an idem.ErrStoreUnavailable", err)
	}
	if n := countRows(t, st, table); n != 0 {
		t.Fatalf("%d rows remain after a failed COMMIT", n)
	}
	res, err = st.DoTx(ctx, "commit-fails", fp, func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
		ran++
		_, err := tx.Exec(ctx, `INSERT INTO `+table+` (customer) VALUES ('c1')`)
		return idem.Response{Status: 201, Body: []byte("ok")}, err
	})
	if err != nil || !res.Kept || res.Replayed || ran != 2 {
		t.Fatalf("retry after a failed COMMIT: %+v, %v, fn ran %d times; want executed and kept", res, err, ran)
	}
}
