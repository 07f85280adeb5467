package mysqlstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/storetest/txtest"
)

// TestTxConformance runs the transaction-mode suite on TxRunner, with an orders table beside
// each store's records table.
func TestTxConformance(t *testing.T) {
	t.Parallel()
	txtest.Run(t, func(t *testing.T, cfg txtest.Config) txtest.Harness {
		d := db(t)
		ctx := context.Background()
		table, orders, attach := strings.Cut(cfg.Attach, " ")
		var st *mysqlstore.Store
		if attach {
			var err error
			if st, err = mysqlstore.New(d, mysqlstore.Options{Database: testDatabase, Table: table}); err != nil {
				t.Fatal(err)
			}
		} else {
			table, orders = randomName("t_"), "`"+testDatabase+"`.`"+randomName("orders_")+"`"
			st = newStore(t, mysqlstore.Options{Table: table})
			if _, err := d.ExecContext(ctx, "CREATE TABLE "+orders+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, amount BIGINT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = d.ExecContext(ctx, "DROP TABLE IF EXISTS "+orders) })
		}
		return txtest.Harness{
			Runner: mysqlstore.NewTxRunner(st, mysqlstore.TxOptions{Wait: cfg.Wait}),
			Store:  st,
			Insert: func(ctx context.Context) error {
				_, err := mysqlstore.TxFromContext(ctx).ExecContext(ctx, "INSERT INTO "+orders+" (amount) VALUES (4200)")
				return err
			},
			Count: func(ctx context.Context) (n int, err error) {
				err = d.QueryRowContext(ctx, "SELECT count(*) FROM "+orders).Scan(&n)
				return n, err
			},
			Name: table + " " + orders,
		}
	})
}
