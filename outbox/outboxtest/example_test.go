package outboxtest_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/outboxtest"
	"github.com/idemkit/idem/outbox/sqliteoutbox"
)

// In a test of a package that keeps an outbox table: a fresh table per test, its Store, a way
// to add an event in a transaction that commits or rolls back, and a count of its rows.
func ExampleRun() {
	testConformance := func(t *testing.T, db *sql.DB) {
		outboxtest.Run(t, func(t *testing.T) outboxtest.Table {
			st, err := sqliteoutbox.New(db, sqliteoutbox.Options{})
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
					defer tx.Rollback()
					if err := sqliteoutbox.Add(ctx, tx, sqliteoutbox.Options{}, m); err != nil {
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
				Retention: sqliteoutbox.DefaultRetention,
			}
		})
	}
	_ = testConformance
}
