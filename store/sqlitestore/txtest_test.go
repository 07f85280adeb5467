package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/storetest/txtest"
)

// TestTxConformance runs the transaction-mode suite on TxRunner, with an orders table in each
// store's file.
func TestTxConformance(t *testing.T) {
	t.Parallel()
	txtest.Run(t, func(t *testing.T, cfg txtest.Config) txtest.Harness {
		ctx := context.Background()
		path := cfg.Attach
		if path == "" {
			path = filepath.Join(t.TempDir(), "idem.db")
		}
		st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{TxTTL: cfg.TTL, Now: cfg.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		// The business rows, read on a connection of their own.
		d, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		if _, err := d.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		return txtest.Harness{
			Runner: sqlitestore.NewTxRunner(st, sqlitestore.TxOptions{Wait: cfg.Wait}),
			Store:  st,
			Insert: func(ctx context.Context) error {
				_, err := sqlitestore.TxFromContext(ctx).ExecContext(ctx, "INSERT INTO orders (amount) VALUES (4200)")
				return err
			},
			Count: func(ctx context.Context) (n int, err error) {
				err = d.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&n)
				return n, err
			},
			Name: path,
			RunTx: func(ctx context.Context, call idem.Call, fn idem.Func) (idem.Result, error) {
				return st.RunTx(ctx, call, func(ctx context.Context, _ *sql.Tx) (idem.Response, error) { return fn(ctx) })
			},
			DoTx: func(ctx context.Context, key, fp string, fn idem.Func) (idem.Result, error) {
				return st.DoTx(ctx, key, fp, func(ctx context.Context, _ *sql.Tx) (idem.Response, error) { return fn(ctx) })
			},
		}
	})
}
