package txbench

import (
	"context"
	"database/sql"
	"net/http"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/sqlitestore"
)

func openSQLite(t *testing.T) *backend {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "orders.db")
	st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// The bare handler's database: the same file, with the store writer's settings (WAL,
	// synchronous NORMAL, BEGIN IMMEDIATE), one connection as SQLite has one writer.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	orders := "txbench_orders"
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+orders+
		" (id INTEGER PRIMARY KEY AUTOINCREMENT, customer TEXT NOT NULL, amount INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return sqlBackend("SQLite (sqlitestore)", db, orders, nil,
		func(r *http.Request) *sql.Tx { return sqlitestore.TxFromContext(r.Context()) },
		idemhttp.Options{Runner: sqlitestore.NewTxRunner(st, sqlitestore.TxOptions{}), RequireKey: true, Scope: idemhttp.SingleCaller()}, t)
}
