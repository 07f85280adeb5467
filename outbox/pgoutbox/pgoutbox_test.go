package pgoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/outboxtest"
	"github.com/idemkit/idem/outbox/pgoutbox"
)

// pool returns a pool of the test database, closed at the test's end.
func pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	db, err := pgxpool.New(context.Background(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

// table creates a fresh outbox table and returns the pool, its options and its store.
func table(t *testing.T) (*pgxpool.Pool, pgoutbox.Options, *pgoutbox.Store) {
	t.Helper()
	ctx := context.Background()
	db := pool(t)
	opt := pgoutbox.Options{Table: fmt.Sprintf("outbox_test_%d", rand.Int64()), Retention: time.Hour}
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
			Count: func(ctx context.Context) (unsent, sent int, err error) {
				return unsent, sent, db.QueryRow(ctx, "SELECT count(*) FILTER (WHERE sent_at IS NULL), count(sent_at) FROM "+opt.Table).Scan(&unsent, &sent)
			},
			Retention: opt.Retention,
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

// A table made before published events were kept and before events had an order key (no
// sent_at or order_key column, a plain (key, id) index) is brought up to date by Migrate, its
// unsent events kept and published in the order of their key.
func TestMigrateKeepsAnOlderTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pool(t)
	opt := pgoutbox.Options{Table: fmt.Sprintf("outbox_old_%d", rand.Int64())}
	if _, err := db.Exec(ctx, `CREATE TABLE `+opt.Table+` (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, topic text NOT NULL,
	header jsonb NOT NULL DEFAULT '{}', body bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	due_at timestamptz NOT NULL DEFAULT '-infinity', claimed_till timestamptz NOT NULL DEFAULT '-infinity',
	attempts integer NOT NULL DEFAULT 0, last_error text);
CREATE INDEX `+opt.Table+`_key_id ON `+opt.Table+` (key, id);
INSERT INTO `+opt.Table+` (key, topic, body) VALUES ('k', 't', 'old'), ('k', 't', 'old-2')`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE "+opt.Table) })
	for range 2 {
		if err := pgoutbox.Migrate(ctx, db, opt); err != nil {
			t.Fatal(err)
		}
	}
	st, err := pgoutbox.New(db, opt)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := st.Claim(ctx, time.Now(), 10, time.Minute)
	if err != nil || len(ms) != 1 || string(ms[0].Body) != "old" || ms[0].OrderKey != "k" {
		t.Fatalf("claim after migrating: %v %v, want the first old event only, with order key k", ms, err)
	}
	if err := st.Sent(ctx, ms[0]); err != nil {
		t.Fatal(err)
	}
	var sent int
	if err := db.QueryRow(ctx, "SELECT count(sent_at) FROM "+opt.Table).Scan(&sent); err != nil || sent != 1 {
		t.Fatalf("%d rows marked sent (%v), want 1", sent, err)
	}
}

// A table in a schema of its own, whose name needs quoting, is created, migrated again and
// used as any other.
func TestMigrateInSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pool(t)
	opt := pgoutbox.Options{Schema: fmt.Sprintf("outbox's %d", rand.Int64()), Table: "Events"}
	if _, err := db.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{opt.Schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{opt.Schema}.Sanitize()+` CASCADE`)
	})
	for range 2 {
		if err := pgoutbox.Migrate(ctx, db, opt); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgoutbox.Add(ctx, db, opt, outbox.Message{Key: "order-1/paid", OrderKey: "order-1", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	st, err := pgoutbox.New(db, opt)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := st.Claim(ctx, time.Now(), 10, time.Minute)
	if err != nil || len(ms) != 1 || ms[0].Key != "order-1/paid" || ms[0].OrderKey != "order-1" {
		t.Fatalf("claim: %+v %v, want the event with its order key", ms, err)
	}
}

// TestMigrateConcurrently: the replicas of a service that start at once each run Migrate on
// the same new table, and every one of them succeeds (PostgreSQL's CREATE TABLE IF NOT
// EXISTS alone fails in all but one of two sessions that race on a new name).
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pool(t)
	for round := range 5 {
		opt := pgoutbox.Options{Table: fmt.Sprintf("outbox_race_%d_%d", round, rand.Int64())}
		t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE IF EXISTS "+opt.Table) })
		const n = 8
		errs := make(chan error, n)
		start := make(chan struct{})
		for range n {
			go func() {
				conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
				if err != nil {
					errs <- err
					return
				}
				defer conn.Close(ctx)
				<-start
				errs <- pgoutbox.Migrate(ctx, conn, opt)
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
