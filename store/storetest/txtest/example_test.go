package txtest_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/storetest/txtest"
)

// A store's transaction-mode test is a constructor and a call. The constructor makes a store
// and a business table of its own (or, with Config.Attach, reopens those of an earlier call,
// in the crash test's child process), and adapters that insert a row through the runner's
// transaction and count the committed rows.
func ExampleRun() {
	conformance := func(t *testing.T) {
		txtest.Run(t, func(t *testing.T, cfg txtest.Config) txtest.Harness {
			path := cfg.Attach
			if path == "" {
				path = filepath.Join(t.TempDir(), "idem.db")
			}
			st, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{TxTTL: cfg.TTL, Now: cfg.Now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			return txtest.Harness{
				Runner: sqlitestore.NewTxRunner(st, sqlitestore.TxOptions{Wait: cfg.Wait}),
				Store:  st,
				Insert: func(ctx context.Context) error {
					_, err := sqlitestore.TxFromContext(ctx).ExecContext(ctx, `INSERT INTO orders DEFAULT VALUES`)
					return err
				},
				Count: func(ctx context.Context) (n int, err error) {
					err = db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&n)
					return n, err
				},
				Name: path,
			}
		})
	}
	_ = conformance // in a _test.go file: func TestTxConformance(t *testing.T) { ... }
}
