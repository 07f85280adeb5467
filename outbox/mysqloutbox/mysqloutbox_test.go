package mysqloutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/mysqloutbox"
	"github.com/idemkit/idem/outbox/outboxtest"
)

// The outbox conformance suite on MySQL or MariaDB (IDEM_MYSQL_URL).
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test (MySQL); skipped with -short")
	}
	db, err := sql.Open("mysql", testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	outboxtest.Run(t, func(t *testing.T) outboxtest.Table {
		ctx := context.Background()
		opt := mysqloutbox.Options{Table: fmt.Sprintf("outbox_test_%d", rand.Int64N(1<<62)), Retention: time.Hour}
		if err := mysqloutbox.Migrate(ctx, db, opt); err != nil {
			t.Fatal(err)
		}
		if err := mysqloutbox.Migrate(ctx, db, opt); err != nil {
			t.Fatalf("Migrate on an existing table: %v", err)
		}
		t.Cleanup(func() { _, _ = db.Exec("DROP TABLE " + opt.Table) })
		st, err := mysqloutbox.New(db, opt)
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
				if err := mysqloutbox.Add(ctx, tx, opt, m); err != nil {
					return err
				}
				if commit {
					return tx.Commit()
				}
				return nil
			},
			Count: func(ctx context.Context) (unsent, sent int, err error) {
				return unsent, sent, db.QueryRowContext(ctx, "SELECT COALESCE(SUM(sent_us = 0), 0), COALESCE(SUM(sent_us > 0), 0) FROM "+opt.Table).Scan(&unsent, &sent)
			},
			Retention: opt.Retention,
		}
	})
}

// A table name that is not letters, digits and underscores, or a nil db, is an OptionError.
func TestOptions(t *testing.T) {
	var oe *idem.OptionError
	if _, err := mysqloutbox.New(nil, mysqloutbox.Options{}); !errors.As(err, &oe) || oe.Field != "db" {
		t.Errorf("nil db: %v", err)
	}
	if _, err := mysqloutbox.New(&sql.DB{}, mysqloutbox.Options{Table: "x`; DROP"}); !errors.As(err, &oe) || oe.Field != "Options.Table" || !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("bad table name: %v", err)
	}
}

// TestMigrateConcurrently: the replicas of a service that start at once each run Migrate on
// the same new table, and every one of them succeeds.
func TestMigrateConcurrently(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test (MySQL); skipped with -short")
	}
	t.Parallel()
	db, err := sql.Open("mysql", testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	for round := range 5 {
		opt := mysqloutbox.Options{Table: fmt.Sprintf("outbox_race_%d_%d", round, rand.Int64N(1<<62))}
		t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + opt.Table) })
		const n = 8
		errs := make(chan error, n)
		start := make(chan struct{})
		for range n {
			go func() {
				<-start
				errs <- mysqloutbox.Migrate(context.Background(), db, opt)
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
