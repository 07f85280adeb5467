// Package pgoutbox keeps an outbox table in PostgreSQL: Add writes an event in the caller's
// transaction (pgstore's transaction mode hands it one: pgstore.TxFromContext), and Store is
// the table as an outbox.Relay reads it.
package pgoutbox

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

// DefaultTable is the outbox table's name when Options.Table is empty.
const DefaultTable = "idem_outbox"

// Execer runs a statement: a pgx.Tx, a *pgx.Conn or a *pgxpool.Pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// DefaultRetention is how long published events are kept when Options.Retention is 0.
const DefaultRetention = 24 * time.Hour

// Options name the table.
type Options struct {
	// Table is the outbox table's name. Default DefaultTable.
	Table string
	// Schema holds the table. Default: the connection's search_path.
	Schema string
	// Retention is how long a published event stays in the table (to look into) before
	// Store.Sweep deletes it. Default DefaultRetention. Add and Migrate ignore it.
	Retention time.Duration
}

func (o Options) ident() string {
	t := o.Table
	if t == "" {
		t = DefaultTable
	}
	if o.Schema != "" {
		return pgx.Identifier{o.Schema, t}.Sanitize()
	}
	return pgx.Identifier{t}.Sanitize()
}

// Add writes m into the outbox through tx, so that it commits (or rolls back) with the rest
// of tx's writes. m.ID, m.CreatedAt and m.Attempts are ignored.
func Add(ctx context.Context, tx Execer, opt Options, m outbox.Message) error {
	if err := m.Check(); err != nil {
		return err
	}
	header := []byte("{}")
	if len(m.Header) > 0 {
		var err error
		if header, err = json.Marshal(m.Header); err != nil {
			return fmt.Errorf("pgoutbox: %w: header: %v", idem.ErrInvalidInput, err)
		}
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+opt.ident()+` (key, order_key, topic, header, body) VALUES ($1, $2, $3, $4, $5)`,
		m.Key, cmp.Or(m.OrderKey, m.Key), m.Topic, header, body)
	if err != nil {
		return fmt.Errorf("pgoutbox: add: %w", err)
	}
	return nil
}

// migrateLock is the advisory lock key Migrate holds while it runs ("idem/out" in ASCII).
const migrateLock int64 = 0x6964656d2f6f7574

// Migrate creates the outbox table and its indexes if they do not exist. Several processes
// may run it at once: they take turns.
func Migrate(ctx context.Context, db Execer, opt Options) error {
	t := opt.ident()
	idx := func(suffix string) string { return pgx.Identifier{tableName(opt) + suffix}.Sanitize() }
	// The unsent events are found through partial indexes, however many sent ones are kept;
	// a table made before sent events were kept gets sent_at and the indexes here, and one
	// made before events had an order key gets order_key, filled with each event's key (the
	// order it was published in until then), once: a table that has it is not scanned.
	// The statements run as one transaction, which first takes an advisory lock: the
	// replicas of a service that start at once migrate one after the other (two concurrent
	// CREATE TABLE IF NOT EXISTS of one new name fail in one of the two sessions).
	_, err := db.Exec(ctx, `SELECT pg_advisory_xact_lock(`+strconv.FormatInt(migrateLock, 10)+`);
CREATE TABLE IF NOT EXISTS `+t+` (
	id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	key          text        NOT NULL,
	order_key    text        NOT NULL,
	topic        text        NOT NULL,
	header       jsonb       NOT NULL DEFAULT '{}',
	body         bytea       NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
	due_at       timestamptz NOT NULL DEFAULT '-infinity',
	claimed_till timestamptz NOT NULL DEFAULT '-infinity',
	attempts     integer     NOT NULL DEFAULT 0,
	last_error   text,
	sent_at      timestamptz
);
ALTER TABLE `+t+` ADD COLUMN IF NOT EXISTS sent_at timestamptz;
DO $$ BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '`+strings.ReplaceAll(t, "'", "''")+`'::regclass AND attname = 'order_key' AND NOT attisdropped) THEN
		ALTER TABLE `+t+` ADD COLUMN order_key text;
		UPDATE `+t+` SET order_key = key;
		ALTER TABLE `+t+` ALTER COLUMN order_key SET NOT NULL;
	END IF;
END $$;
DROP INDEX IF EXISTS `+schemaQualified(opt, tableName(opt)+"_key_id")+`;
DROP INDEX IF EXISTS `+schemaQualified(opt, tableName(opt)+"_unsent_key_id")+`;
CREATE INDEX IF NOT EXISTS `+idx("_unsent_order_id")+` ON `+t+` (order_key, id) WHERE sent_at IS NULL;
CREATE INDEX IF NOT EXISTS `+idx("_unsent_id")+` ON `+t+` (id) WHERE sent_at IS NULL;
CREATE INDEX IF NOT EXISTS `+idx("_sent_at")+` ON `+t+` (sent_at) WHERE sent_at IS NOT NULL`)
	if err != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	return nil
}

func schemaQualified(o Options, name string) string {
	if o.Schema != "" {
		return pgx.Identifier{o.Schema, name}.Sanitize()
	}
	return pgx.Identifier{name}.Sanitize()
}

func tableName(o Options) string {
	if o.Table == "" {
		return DefaultTable
	}
	return o.Table
}

// Store is an outbox table in PostgreSQL, for outbox.NewRelay. Create it with New.
type Store struct {
	db        *pgxpool.Pool
	retention time.Duration
	claim     string
	sent      string
	retry     string
	lag       string
	sweep     string
}

var _ outbox.Store = (*Store)(nil)

// New returns the outbox table of opt in db. Call Migrate first (once per database).
func New(db *pgxpool.Pool, opt Options) (*Store, error) {
	if db == nil {
		return nil, &idem.OptionError{Package: "pgoutbox", Field: "db", Problem: "is nil"}
	}
	if opt.Retention < 0 {
		return nil, &idem.OptionError{Package: "pgoutbox", Field: "Options.Retention", Problem: opt.Retention.String() + " is negative"}
	}
	t := opt.ident()
	return &Store{
		db:        db,
		retention: cmp.Or(opt.Retention, DefaultRetention),
		// Only the oldest unsent event of each order key is eligible; FOR UPDATE SKIP LOCKED
		// keeps two relays off one event, and the NOT EXISTS keeps an order key's later
		// events back while an earlier one is unsent, whoever holds it.
		claim: `UPDATE ` + t + ` o SET claimed_till = $1::timestamptz + $3::interval, attempts = o.attempts + 1
WHERE o.id IN (
	SELECT h.id FROM ` + t + ` h
	WHERE h.sent_at IS NULL AND h.due_at <= $1 AND h.claimed_till <= $1
	  AND NOT EXISTS (SELECT 1 FROM ` + t + ` e WHERE e.order_key = h.order_key AND e.id < h.id AND e.sent_at IS NULL)
	ORDER BY h.id LIMIT $2
	FOR UPDATE SKIP LOCKED)
RETURNING o.id, o.key, o.order_key, o.topic, o.header, o.body, o.created_at, o.attempts`,
		sent:  `UPDATE ` + t + ` SET sent_at = clock_timestamp(), claimed_till = '-infinity' WHERE id = $1 AND sent_at IS NULL`,
		retry: `UPDATE ` + t + ` SET due_at = $2, claimed_till = '-infinity', last_error = left($4, 1000) WHERE id = $1 AND attempts = $3 AND sent_at IS NULL`,
		lag:   `SELECT coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8 FROM ` + t + ` WHERE sent_at IS NULL`,
		sweep: `DELETE FROM ` + t + ` WHERE id IN (SELECT id FROM ` + t + ` WHERE sent_at IS NOT NULL AND sent_at < $1 ORDER BY sent_at LIMIT $2)`,
	}, nil
}

// Claim implements outbox.Store.
func (s *Store) Claim(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]outbox.Message, error) {
	rows, err := s.db.Query(ctx, s.claim, now, limit, lease)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outbox.Message
	for rows.Next() {
		var m outbox.Message
		var header []byte
		if err := rows.Scan(&m.ID, &m.Key, &m.OrderKey, &m.Topic, &header, &m.Body, &m.CreatedAt, &m.Attempts); err != nil {
			return nil, err
		}
		if len(header) > 2 {
			if err := json.Unmarshal(header, &m.Header); err != nil {
				return nil, fmt.Errorf("%w: event %d: header: %v", idem.ErrCorruptRecord, m.ID, err)
			}
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// UPDATE … RETURNING does not keep the subquery's order.
	sortByID(out)
	return out, nil
}

func sortByID(ms []outbox.Message) {
	slices.SortFunc(ms, func(a, b outbox.Message) int { return cmp.Compare(a.ID, b.ID) })
}

// Sent implements outbox.Store.
func (s *Store) Sent(ctx context.Context, m outbox.Message) error {
	_, err := s.db.Exec(ctx, s.sent, m.ID)
	return err
}

// Retry implements outbox.Store.
func (s *Store) Retry(ctx context.Context, m outbox.Message, at time.Time, cause string) error {
	_, err := s.db.Exec(ctx, s.retry, m.ID, at, m.Attempts, cause)
	return err
}

// Lag implements outbox.Store.
func (s *Store) Lag(ctx context.Context) (time.Duration, error) {
	var secs float64
	if err := s.db.QueryRow(ctx, s.lag).Scan(&secs); err != nil {
		return 0, err
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// Sweep implements outbox.Store: one DELETE of at most batch events sent before
// now − Options.Retention.
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	tag, err := s.db.Exec(ctx, s.sweep, now.Add(-s.retention), batch)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}
