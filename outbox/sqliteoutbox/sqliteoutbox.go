// Package sqliteoutbox keeps an outbox table in SQLite: Add writes an event in the caller's
// transaction (sqlitestore's transaction mode hands it one: sqlitestore.TxFromContext), and Store
// is the table as an outbox.Relay reads it.
//
// Like pgoutbox's, the table holds each event until it is published: a relay claims the
// oldest unsent event of each order key (outbox.Message.OrderKey, kept in the column
// order_key; a conditional UPDATE, so two relays never publish one event at once, and an
// order key's later events wait while an earlier one is unsent), publishes it and marks it
// sent; a relay that stops holds its claims only for its lease. Sent events are kept for
// Options.Retention, then Store.Sweep deletes them in batches (store/sweeper runs it).
package sqliteoutbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/internal/sqloutbox"
)

// DefaultTable is the outbox table's name when Options.Table is empty.
const DefaultTable = "idem_outbox"

// Execer runs a statement: a *sql.Tx, a *sql.DB or a *sql.Conn.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// DefaultRetention is how long published events are kept when Options.Retention is 0.
const DefaultRetention = 24 * time.Hour

// Options name the table.
type Options struct {
	// Table is the outbox table's name: letters, digits and underscores. Default DefaultTable.
	Table string
	// Retention is how long a published event stays in the table (to look into) before
	// Store.Sweep deletes it. Default DefaultRetention. Add and Migrate ignore it.
	Retention time.Duration
}

func (o Options) table() string {
	if o.Table == "" {
		return DefaultTable
	}
	return o.Table
}

var dialect = sqloutbox.Dialect{
	Package:   "sqliteoutbox",
	Quote:     func(s string) string { return `"` + s + `"` },
	NowMicros: "CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)",
	Create: []string{`CREATE TABLE IF NOT EXISTS %[1]s (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	okey       TEXT NOT NULL,
	order_key  TEXT NOT NULL,
	topic      TEXT NOT NULL,
	header     TEXT NOT NULL,
	body       BLOB NOT NULL,
	created_us INTEGER NOT NULL,
	due_us     INTEGER NOT NULL DEFAULT 0,
	claimed_us INTEGER NOT NULL DEFAULT 0,
	attempts   INTEGER NOT NULL DEFAULT 0,
	last_error TEXT,
	sent_us    INTEGER NOT NULL DEFAULT 0
)`, `CREATE INDEX IF NOT EXISTS %[2]s ON %[1]s (order_key, sent_us, id)`, `CREATE INDEX IF NOT EXISTS %[3]s ON %[1]s (sent_us)`},
	Sweep: "DELETE FROM %[1]s WHERE id IN (SELECT id FROM %[1]s WHERE sent_us > 0 AND sent_us < ? ORDER BY sent_us LIMIT ?)",
}

// Add writes m into the outbox through tx, so that it commits (or rolls back) with the rest
// of tx's writes. m.ID, m.CreatedAt and m.Attempts are ignored. An invalid m is an error
// matching idem.ErrInvalidInput.
func Add(ctx context.Context, tx Execer, opt Options, m outbox.Message) error {
	return dialect.Add(ctx, tx, opt.table(), m)
}

// Migrate creates the outbox table and its indexes if they do not exist. Processes that share
// the file may run it at once: SQLite answers some of their conflicts with "database is
// locked" at once, without waiting out the busy timeout (two openers switching a new file to
// WAL, say), and Migrate tries again, pausing longer each time, for up to migrateBusyFor or
// until ctx ends.
func Migrate(ctx context.Context, db Execer, opt Options) error {
	deadline := time.Now().Add(migrateBusyFor)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		err := dialect.Migrate(ctx, db, opt.table())
		if err == nil || !isBusy(err) || ctx.Err() != nil || time.Now().Add(pause).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
	}
}

// migrateBusyFor bounds how long Migrate tries again on a busy database.
const migrateBusyFor = 10 * time.Second

// isBusy reports whether err is SQLite's "database is locked" (SQLITE_BUSY).
func isBusy(err error) bool {
	var se interface{ Code() int }
	return errors.As(err, &se) && se.Code()&0xff == 5
}

// Store is an outbox table in SQLite, for outbox.NewRelay. Create it with New.
type Store struct{ s *sqloutbox.Store }

var _ outbox.Store = (*Store)(nil)

// New returns the outbox table of opt in db. Call Migrate first (once per database). A nil db
// or an invalid table name is an *idem.OptionError.
func New(db *sql.DB, opt Options) (*Store, error) {
	if opt.Retention < 0 {
		return nil, &idem.OptionError{Package: dialect.Package, Field: "Options.Retention", Problem: opt.Retention.String() + " is negative"}
	}
	s, err := dialect.New(db, opt.table(), cmp.Or(opt.Retention, DefaultRetention))
	if err != nil {
		return nil, err
	}
	return &Store{s}, nil
}

// Claim implements outbox.Store.
func (s *Store) Claim(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]outbox.Message, error) {
	return s.s.Claim(ctx, now, limit, lease)
}

// Sent implements outbox.Store.
func (s *Store) Sent(ctx context.Context, m outbox.Message) error { return s.s.Sent(ctx, m) }

// Retry implements outbox.Store.
func (s *Store) Retry(ctx context.Context, m outbox.Message, at time.Time, cause string) error {
	return s.s.Retry(ctx, m, at, cause)
}

// Sweep implements outbox.Store: one DELETE of at most batch events sent before
// now − Options.Retention. store/sweeper runs it: sweeper.Start(st, sweeper.Options{}).
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	return s.s.Sweep(ctx, now, batch)
}

// Lag implements outbox.Store.
func (s *Store) Lag(ctx context.Context) (time.Duration, error) { return s.s.Lag(ctx) }
