package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
)

// TestDoTxRetriesSerializationFailure: a transaction PostgreSQL aborts with
// serialization_failure (40001) or deadlock_detected (40P01) is rolled back and run again,
// claim included: the caller sees the second attempt's result, executed and kept, and only
// its writes remain.
func TestDoTxRetriesSerializationFailure(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"serialization_failure", "deadlock_detected"} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			st := newStore(t, pgstore.Options{})
			orders := ordersTable(t, st)
			ran := 0
			res, err := st.DoTx(context.Background(), "retry-"+code, idem.Fingerprint([]byte(code)), func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
				ran++
				if _, err := tx.Exec(ctx, `INSERT INTO `+orders+` (customer, amount) VALUES ('c1', 1)`); err != nil {
					return idem.Response{}, err
				}
				if ran == 1 {
					_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'aborted' USING ERRCODE = '`+code+`'; END $$`)
					return idem.Response{}, err
				}
				return idem.Response{Status: 201, Body: []byte("ok")}, nil
			})
			if err != nil || !res.Kept || string(res.Response.Body) != "ok" || ran != 2 {
				t.Fatalf("%+v, %v after %d runs; want the second attempt executed and kept", res, err, ran)
			}
			if n := countRows(t, st, orders); n != 1 {
				t.Fatalf("%d rows, want the second attempt's 1", n)
			}
		})
	}
}
