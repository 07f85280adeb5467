package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storetest/txtest"
)

// TestTxConformance runs the transaction-mode suite on TxRunner, with an orders table beside
// each store's records table.
func TestTxConformance(t *testing.T) {
	t.Parallel()
	txtest.Run(t, func(t *testing.T, cfg txtest.Config) txtest.Harness {
		var st *pgstore.Store
		var orders string
		if table, rest, ok := strings.Cut(cfg.Attach, " "); ok {
			var err error
			if st, err = pgstore.New(pool(t), pgstore.Options{Schema: testSchema, Table: table}); err != nil {
				t.Fatal(err)
			}
			orders = rest
		} else {
			st = newStore(t, pgstore.Options{})
			orders = ordersTable(t, st)
		}
		return txtest.Harness{
			Runner: pgstore.NewTxRunner(st, pgstore.TxOptions{Wait: cfg.Wait}),
			Store:  st,
			Insert: func(ctx context.Context) error {
				_, err := pgstore.TxFromContext(ctx).Exec(ctx, `INSERT INTO `+orders+` (customer, amount) VALUES ('c1', 4200)`)
				return err
			},
			Count: func(ctx context.Context) (n int, err error) {
				err = st.Pool().QueryRow(ctx, `SELECT count(*) FROM `+orders).Scan(&n)
				return n, err
			},
			Name: tableName(st) + " " + orders,
		}
	})
}
