package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"modernc.org/sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
)

// foreignKeysFile names the database files whose connections enforce foreign keys: SQLite
// leaves them off unless a connection turns them on, and a connection cannot do it inside a
// transaction, so the driver's connection hook does it for every connection to such a file.
const foreignKeysFile = "foreign-keys-on.db"

func init() {
	// Registered before any test opens a connection (the driver reads its hooks unlocked).
	sqlite.RegisterConnectionHook(func(c sqlite.ExecQuerierContext, dsn string) error {
		if !strings.Contains(dsn, foreignKeysFile) {
			return nil
		}
		_, err := c.ExecContext(context.Background(), "PRAGMA foreign_keys = ON", nil)
		return err
	})
}

// TestDoTxCommitFailureIsNotKept: when SQLite refuses the COMMIT (here a deferred foreign key
// that the caller's write breaks, checked only at commit), DoTx reports a store error and Kept
// false, never the executed result: nothing was written, no record remains, the writer
// connection is usable again, and a retry with the same key executes.
func TestDoTxCommitFailureIsNotKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), foreignKeysFile)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY);
		CREATE TABLE lines (id INTEGER PRIMARY KEY,
			order_id INTEGER NOT NULL REFERENCES orders (id) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })

	fp := idem.Fingerprint([]byte("deferred foreign key"))
	ran := 0
	res, err := st.DoTx(ctx, "commit-fails", fp, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		ran++
		// The line names an order that does not exist: accepted now, refused at COMMIT.
		if _, err := tx.ExecContext(ctx, `INSERT INTO lines (order_id) VALUES (42)`); err != nil {
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
	if !strings.Contains(err.Error(), "FOREIGN KEY") {
		t.Fatalf("a COMMIT that failed: %v, want SQLite's foreign key error", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM lines`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after a failed COMMIT: %d lines (%v), want none", n, err)
	}
	if _, err := st.Get(ctx, "commit-fails"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("after a failed COMMIT, Get: %v, want idem.ErrNotFound", err)
	}

	res, err = st.DoTx(ctx, "commit-fails", fp, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		ran++
		_, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (42); INSERT INTO lines (order_id) VALUES (42)`)
		return idem.Response{Status: 201, Body: []byte("ok")}, err
	})
	if err != nil || !res.Kept || res.Replayed || ran != 2 {
		t.Fatalf("retry after a failed COMMIT: %+v, %v, fn ran %d times; want executed and kept", res, err, ran)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM lines`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the retry: %d lines (%v), want 1", n, err)
	}
}
