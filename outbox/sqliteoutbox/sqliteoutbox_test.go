package sqliteoutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/outboxtest"
	"github.com/idemkit/idem/outbox/sqliteoutbox"
)

// The outbox conformance suite on SQLite, a database file of its own per test.
func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T) outboxtest.Table {
		ctx := context.Background()
		db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "outbox.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		opt := sqliteoutbox.Options{Retention: time.Hour}
		if err := sqliteoutbox.Migrate(ctx, db, opt); err != nil {
			t.Fatal(err)
		}
		if err := sqliteoutbox.Migrate(ctx, db, opt); err != nil {
			t.Fatalf("Migrate on an existing table: %v", err)
		}
		st, err := sqliteoutbox.New(db, opt)
		if err != nil {
			t.Fatal(err)
		}
		return outboxtest.Table{
			Store: st,
			AddTx: func(ctx context.Context, m outbox.Message, commit bool) error {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				defer func() { _ = tx.Rollback() }()
				if err := sqliteoutbox.Add(ctx, tx, opt, m); err != nil {
					return err
				}
				if commit {
					return tx.Commit()
				}
				return nil
			},
			Count: func(ctx context.Context) (unsent, sent int, err error) {
				return unsent, sent, db.QueryRowContext(ctx, "SELECT COALESCE(SUM(sent_us = 0), 0), COALESCE(SUM(sent_us > 0), 0) FROM "+sqliteoutbox.DefaultTable).Scan(&unsent, &sent)
			},
			Retention: opt.Retention,
		}
	})
}

// A table name that is not letters, digits and underscores, or a nil db, is an OptionError.
func TestOptions(t *testing.T) {
	var oe *idem.OptionError
	if _, err := sqliteoutbox.New(nil, sqliteoutbox.Options{}); !errors.As(err, &oe) || oe.Field != "db" {
		t.Errorf("nil db: %v", err)
	}
	if _, err := sqliteoutbox.New(&sql.DB{}, sqliteoutbox.Options{Table: `x"; DROP`}); !errors.As(err, &oe) || oe.Field != "Options.Table" || !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("bad table name: %v", err)
	}
}

// TestMigrateConcurrently: processes that share a new database file (each its own handle,
// with a busy timeout, switching the file to WAL as it opens) and start at once each run
// Migrate on the same new table, and every one of them succeeds.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	const dsn = "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"
	for round := range 20 {
		path := filepath.Join(t.TempDir(), "outbox.db")
		const n = 16
		errs := make(chan error, n)
		start := make(chan struct{})
		for range n {
			db, err := sql.Open("sqlite", "file:"+path+dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			go func() {
				<-start
				errs <- sqliteoutbox.Migrate(context.Background(), db, sqliteoutbox.Options{})
			}()
		}
		close(start)
		for range n {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: one of %d concurrent Migrate calls: %v", round, n, err)
			}
		}
	}
}
