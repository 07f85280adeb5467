package pgoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/outboxtest"
	"github.com/idemkit/idem/outbox/pgoutbox"
)

// table creates a fresh outbox table and returns the pool, its options and its store.
func table(t *testing.T) (*pgxpool.Pool, pgoutbox.Options, *pgoutbox.Store) {
	t.Helper()
	ctx := context.Background()
	db, err := pgxpool.New(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	opt := pgoutbox.Options{Table: fmt.Sprintf("outbox_test_%d", rand.Int64())}
	if err := pgoutbox.Migrate(ctx, db, opt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE "+opt.Table) })
	st, err := pgoutbox.New(db, opt)
	if err != nil {
		t.Fatal(err)
	}
	return db, opt, st
}

// The outbox conformance suite on PostgreSQL.
func TestConformance(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T) outboxtest.Table {
		db, opt, st := table(t)
		return outboxtest.Table{
			Store: st,
			AddTx: func(ctx context.Context, m outbox.Message, commit bool) error {
				tx, err := db.Begin(ctx)
				if err != nil {
					return err
				}
				defer func() { _ = tx.Rollback(ctx) }()
				if err := pgoutbox.Add(ctx, tx, opt, m); err != nil {
					return err
				}
				if commit {
					return tx.Commit(ctx)
				}
				return nil
			},
			Count: func(ctx context.Context) (n int, err error) {
				return n, db.QueryRow(ctx, "SELECT count(*) FROM "+opt.Table).Scan(&n)
			},
		}
	})
}

// TestRelayOptions: bad options are refused with an error naming the field.
func TestRelayOptions(t *testing.T) {
	t.Parallel()
	_, _, st := table(t)
	pub := outbox.PublisherFunc(func(context.Context, outbox.Message) error { return nil })
	for _, o := range []outbox.RelayOptions{{Batch: -1}, {Lease: time.Second, PublishTimeout: 2 * time.Second}, {MinBackoff: time.Second, MaxBackoff: time.Millisecond}} {
		if _, err := outbox.NewRelay(st, pub, o); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%+v: %v, want ErrInvalidInput", o, err)
		}
	}
}
