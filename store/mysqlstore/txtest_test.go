package mysqlstore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/storetest/txtest"
)

// TestTxConformance runs the transaction-mode suite on TxRunner, with an orders table beside
// each store's records table. It has a connection pool of its own: its duplicates, waiting,
// hold their connections, and the other tests' deadlines must not depend on them.
func TestTxConformance(t *testing.T) {
	t.Parallel()
	txConformance(t, false)
}

// The suite again with the lock wait bounded as on MySQL, by the session's setting around the
// claim, instead of MariaDB's per-statement SET STATEMENT.
func TestTxConformanceSessionLockWait(t *testing.T) {
	t.Parallel()
	txConformance(t, true)
}

func txConformance(t *testing.T, sessionLockWait bool) {
	mc, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := mysql.NewConnector(mc)
	if err != nil {
		t.Fatal(err)
	}
	d := sql.OpenDB(c)
	d.SetMaxOpenConns(8) // the server is shared: a few, beside the shared pool
	d.SetMaxIdleConns(8)
	t.Cleanup(func() { _ = d.Close() })
	txtest.Run(t, func(t *testing.T, cfg txtest.Config) txtest.Harness {
		ctx := context.Background()
		table, orders, attach := strings.Cut(cfg.Attach, " ")
		if !attach {
			table, orders = randomName("t_"), "`"+testDatabase+"`.`"+randomName("orders_")+"`"
		}
		st, err := mysqlstore.New(d, mysqlstore.Options{Database: testDatabase, Table: table, TxTTL: cfg.TTL, Now: cfg.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		if sessionLockWait {
			mysqlstore.UseSessionLockWait(st)
		}
		if !attach {
			if err := st.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dropTable(t, d, testDatabase, table) })
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
			RunTx: func(ctx context.Context, call idem.Call, fn idem.Func) (idem.Result, error) {
				return st.RunTx(ctx, call, func(ctx context.Context, _ *sql.Tx) (idem.Response, error) { return fn(ctx) })
			},
			DoTx: func(ctx context.Context, key, fp string, fn idem.Func) (idem.Result, error) {
				return st.DoTx(ctx, key, fp, func(ctx context.Context, _ *sql.Tx) (idem.Response, error) { return fn(ctx) })
			},
		}
	})
}
