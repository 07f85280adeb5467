// Package sqloutbox is an outbox table on database/sql, for the MySQL (MariaDB) and SQLite
// outbox packages: the same columns as pgoutbox's, times in Unix microseconds, and a claim
// that takes each candidate with a conditional UPDATE instead of FOR UPDATE SKIP LOCKED.
package sqloutbox

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

// Dialect is what differs between the databases.
type Dialect struct {
	Package string // for errors: "mysqloutbox"
	Quote   func(ident string) string
	// NowMicros is an SQL expression of the database's clock in Unix microseconds.
	NowMicros string
	// Create are the statements that create the quoted table (%[1]s) and its indexes, whose
	// names end the quoted table name's (%[2]s: …_unsent_order, %[3]s: …_sent). The column
	// order_key holds each event's order key (Message.OrderKey, or its Key when empty).
	Create []string
	// Sweep deletes at most ? (the second argument) rows sent before ? (the first) from the
	// quoted table (%[1]s).
	Sweep string
}

// Execer runs a statement: a *sql.Tx, *sql.DB or *sql.Conn.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// CheckTable reports whether table is a name the outbox accepts.
func (d Dialect) CheckTable(table string) error {
	if !identRE.MatchString(table) {
		return &idem.OptionError{Package: d.Package, Field: "Options.Table", Problem: fmt.Sprintf("%q is not a name of letters, digits and underscores", table)}
	}
	return nil
}

// Add writes m through tx.
func (d Dialect) Add(ctx context.Context, tx Execer, table string, m outbox.Message) error {
	if err := d.CheckTable(table); err != nil {
		return err
	}
	if err := m.Check(); err != nil {
		return err
	}
	header := []byte("{}")
	if len(m.Header) > 0 {
		var err error
		if header, err = json.Marshal(m.Header); err != nil {
			return fmt.Errorf("%s: %w: header: %v", d.Package, idem.ErrInvalidInput, err)
		}
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO `+d.Quote(table)+` (okey, order_key, topic, header, body, created_us) VALUES (?, ?, ?, ?, ?, `+d.NowMicros+`)`,
		m.Key, cmp.Or(m.OrderKey, m.Key), m.Topic, string(header), body)
	if err != nil {
		return fmt.Errorf("%s: add: %w", d.Package, err)
	}
	return nil
}

// Migrate creates the table and its index if they do not exist.
func (d Dialect) Migrate(ctx context.Context, db Execer, table string) error {
	if err := d.CheckTable(table); err != nil {
		return err
	}
	for _, stmt := range d.Create {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(stmt, d.Quote(table), d.Quote(table+"_unsent_order"), d.Quote(table+"_sent"))); err != nil {
			return fmt.Errorf("%s: migrate: %w", d.Package, err)
		}
	}
	return nil
}

// Store is the table as a relay reads it.
type Store struct {
	d                                               Dialect
	db                                              *sql.DB
	retention                                       time.Duration
	candidates, take, read, sent, retry, lag, sweep string
}

// New returns the store of table in db, keeping sent events for retention.
func (d Dialect) New(db *sql.DB, table string, retention time.Duration) (*Store, error) {
	if db == nil {
		return nil, &idem.OptionError{Package: d.Package, Field: "db", Problem: "is nil"}
	}
	if err := d.CheckTable(table); err != nil {
		return nil, err
	}
	if retention <= 0 {
		return nil, &idem.OptionError{Package: d.Package, Field: "Options.Retention", Problem: retention.String() + " is not positive"}
	}
	t := d.Quote(table)
	return &Store{
		d:         d,
		db:        db,
		retention: retention,
		// The oldest unsent event of each order key, due and unclaimed.
		candidates: `SELECT h.id FROM ` + t + ` h WHERE h.sent_us = 0 AND h.due_us <= ? AND h.claimed_us <= ?
  AND NOT EXISTS (SELECT 1 FROM ` + t + ` e WHERE e.order_key = h.order_key AND e.sent_us = 0 AND e.id < h.id)
ORDER BY h.id LIMIT ?`,
		// Taken only if nobody took it meanwhile (two relays reading the same candidates).
		take:  `UPDATE ` + t + ` SET claimed_us = ?, attempts = attempts + 1 WHERE id = ? AND sent_us = 0 AND due_us <= ? AND claimed_us <= ?`,
		read:  `SELECT okey, order_key, topic, header, body, created_us, attempts FROM ` + t + ` WHERE id = ?`,
		sent:  `UPDATE ` + t + ` SET sent_us = ` + d.NowMicros + `, claimed_us = 0 WHERE id = ? AND sent_us = 0`,
		retry: `UPDATE ` + t + ` SET due_us = ?, claimed_us = 0, last_error = ? WHERE id = ? AND attempts = ? AND sent_us = 0`,
		lag:   `SELECT COALESCE(` + d.NowMicros + ` - MIN(created_us), 0) FROM ` + t + ` WHERE sent_us = 0`,
		sweep: fmt.Sprintf(d.Sweep, t),
	}, nil
}

func micros(t time.Time) int64 { return t.UnixMicro() }

// Claim implements outbox.Store.
func (s *Store) Claim(ctx context.Context, now time.Time, limit int, lease time.Duration) ([]outbox.Message, error) {
	rows, err := s.db.QueryContext(ctx, s.candidates, micros(now), micros(now), limit)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []outbox.Message
	for _, id := range ids {
		res, err := s.db.ExecContext(ctx, s.take, micros(now.Add(lease)), id, micros(now), micros(now))
		if err != nil {
			return out, err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			continue // another relay took it, or it was sent
		}
		m := outbox.Message{ID: id}
		var header string
		var created int64
		if err := s.db.QueryRowContext(ctx, s.read, id).Scan(&m.Key, &m.OrderKey, &m.Topic, &header, &m.Body, &created, &m.Attempts); err != nil {
			return out, err
		}
		m.CreatedAt = time.UnixMicro(created)
		if len(header) > 2 {
			if err := json.Unmarshal([]byte(header), &m.Header); err != nil {
				return out, fmt.Errorf("%w: event %d: header: %v", idem.ErrCorruptRecord, id, err)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// Sent implements outbox.Store.
func (s *Store) Sent(ctx context.Context, m outbox.Message) error {
	_, err := s.db.ExecContext(ctx, s.sent, m.ID)
	return err
}

// Retry implements outbox.Store.
func (s *Store) Retry(ctx context.Context, m outbox.Message, at time.Time, cause string) error {
	if len(cause) > 1000 {
		cause = strings.ToValidUTF8(cause[:1000], "")
	}
	_, err := s.db.ExecContext(ctx, s.retry, micros(at), cause, m.ID, m.Attempts)
	return err
}

// Lag implements outbox.Store.
func (s *Store) Lag(ctx context.Context) (time.Duration, error) {
	var us int64
	if err := s.db.QueryRowContext(ctx, s.lag).Scan(&us); err != nil {
		return 0, err
	}
	return time.Duration(max(us, 0)) * time.Microsecond, nil
}

// Sweep implements outbox.Store: one DELETE of at most batch events sent before
// now − retention.
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	res, err := s.db.ExecContext(ctx, s.sweep, micros(now.Add(-s.retention)), batch)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}
