// Package sqllist builds and reads the listing query of the SQL stores (pgstore, mysqlstore,
// sqlitestore): in key order, one range scan of the key's primary index, bounded by the prefix
// and the cursor; newest first, one backward range scan of the (created_at, key) index,
// bounded by the time range and the cursor; either filtered by the other conditions and
// stopped after Limit+1 rows so that a page knows whether another follows. Each store gives
// its dialect; the logic is written once.
package sqllist

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// Dialect is what differs between the SQL stores' listing queries.
type Dialect struct {
	// Key is the key column as written in SQL (quoted where the database needs it).
	Key string
	// Head returns the expression of the first n bytes of the stored response.
	Head func(n int) string
	// Param returns the placeholder of the i-th argument, counted from 1.
	Param func(i int) string
	// KeyArg converts a key bound to the argument the driver compares byte for byte; nil
	// passes the string.
	KeyArg func(string) any
	// Starts is the expression of the record's start count (Record.Starts); "" reads 0, for a
	// table without the column, and the record then reports its attempts.
	Starts string
}

// Dollar numbers placeholders as PostgreSQL does: $1, $2…
func Dollar(i int) string { return "$" + strconv.Itoa(i) }

// Question is the placeholder of MySQL and SQLite.
func Question(int) string { return "?" }

// Query returns the SELECT of a listing page of table (already quoted) and its arguments.
func Query(d Dialect, table string, b storekit.ListBounds) (string, []any) {
	var sb strings.Builder
	var args []any
	key := func(k string) any {
		if d.KeyArg != nil {
			return d.KeyArg(k)
		}
		return k
	}
	add := func(cond string, v any) {
		args = append(args, v)
		if len(args) > 1 && !strings.HasPrefix(cond, " ") {
			sb.WriteString(" AND ")
		}
		sb.WriteString(cond + " " + d.Param(len(args)))
	}
	sb.WriteString("SELECT " + d.Key + ", fingerprint, state, token, lease_until, attempts, " +
		d.Head(storekit.ListResponseHeadLen) + ", created_at, completed_at, expires_at, route, " + cmp.Or(d.Starts, "0") + " FROM " + table + " WHERE ")
	add(d.Key+" >=", key(b.From))
	if b.To != "" {
		add(d.Key+" <", key(b.To))
	}
	if b.HasAfter {
		add(d.Key+" >", key(b.After))
	}
	if b.State != 0 {
		add("state =", int64(b.State))
	}
	if b.CreatedBefore != 0 {
		add("created_at <", b.CreatedBefore)
	}
	if b.HasSince {
		add("created_at >=", b.CreatedSince)
	}
	if b.Route != "" {
		add("route =", b.Route)
	}
	if b.Status != 0 {
		// A completed record's response starts with the codec's version, a flags byte and
		// the status as a uvarint (see storekit.EncodeResponse); a uvarint is prefix-free, so
		// these bytes, with either flag, are exactly the records with this status.
		head := d.Head(2 + len(binary.AppendUvarint(nil, uint64(b.Status))))
		add("state =", int64(idem.StateCompleted))
		add("("+head+" =", statusHead(false, b.Status))
		add(" OR "+head+" =", statusHead(true, b.Status))
		sb.WriteString(")")
	}
	if b.Newest {
		if b.HasAfter {
			add("(created_at <", b.AfterCreated)
			add(" OR created_at =", b.AfterCreated)
			add(" AND "+d.Key+" <", key(b.After))
			sb.WriteString(")")
		}
		args = append(args, b.Limit+1)
		sb.WriteString(" ORDER BY created_at DESC, " + d.Key + " DESC LIMIT " + d.Param(len(args)))
		return sb.String(), args
	}
	args = append(args, b.Limit+1)
	sb.WriteString(" ORDER BY " + d.Key + " LIMIT " + d.Param(len(args)))
	return sb.String(), args
}

// statusHead returns the first bytes of a stored response with this status, its body omitted
// or not: the version, the flags and the status.
func statusHead(omitted bool, status int) []byte {
	b := storekit.EncodeResponse(idem.Response{Status: status, BodyOmitted: omitted})
	return b[:2+len(binary.AppendUvarint(nil, uint64(status)))]
}

// Rows is what Read needs of a result set: *sql.Rows and pgx.Rows both have it.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// Read reads the rows of Query into a page. storeErr wraps an error of the database (the
// store's usual error for an operation that failed); a stored record that does not decode
// fails with an error prefixed by pkg ("pgstore: list: …").
func Read(rows Rows, b storekit.ListBounds, pkg string, storeErr func(error) error) (idem.ListPage, error) {
	recs := make([]idem.Record, 0, min(b.Limit+1, 64))
	for rows.Next() {
		var r idem.Record
		var state, attempts, lease, created, expires, starts int64
		var completed sql.NullInt64
		var head []byte
		if err := rows.Scan(&r.Key, &r.Fingerprint, &state, &r.Token, &lease, &attempts, &head, &created, &completed, &expires, &r.Route, &starts); err != nil {
			return idem.ListPage{}, storeErr(err)
		}
		r.State, r.Attempts, r.Starts = idem.State(state), int(attempts), int(max(starts, attempts))
		r.LeaseUntil, r.CreatedAt, r.ExpiresAt = time.UnixMicro(lease), time.UnixMicro(created), time.UnixMicro(expires)
		if err := storekit.FillListed(&r, head, completed.Int64); err != nil {
			return idem.ListPage{}, fmt.Errorf("%s: list: %w", pkg, err)
		}
		recs = append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return idem.ListPage{}, storeErr(err)
	}
	return b.Page(recs), nil
}

// Source is one store's side of a listing: its dialect, its table, and how it reaches the
// database.
type Source struct {
	Dialect Dialect
	// Table is the table's name, quoted as the database needs it.
	Table string
	// Pkg prefixes the error of a stored record that does not decode ("pgstore").
	Pkg string
	// Ready fails when the store is closed or its schema is not in place.
	Ready func(context.Context) error
	// Err wraps an error of the database as the store's error for the list operation.
	Err func(error) error
	// Query sends query with args and hands its rows to read, closing them afterwards.
	Query QueryFunc
}

// QueryFunc sends query with args and hands its rows to read, closing them afterwards; it
// returns read's error, or the database's.
type QueryFunc func(ctx context.Context, query string, args []any, read func(Rows) error) error

// SQL is the QueryFunc of a database/sql handle.
func SQL(db *sql.DB) QueryFunc {
	return func(ctx context.Context, query string, args []any, read func(Rows) error) error {
		rows, err := db.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		return read(rows)
	}
}

// List returns the page of src's records that q asks for: one query (Query), read by Read.
func List(ctx context.Context, src Source, q idem.ListQuery) (idem.ListPage, error) {
	b, err := storekit.Bounds(q)
	if err != nil {
		return idem.ListPage{}, err
	}
	if err := src.Ready(ctx); err != nil {
		return idem.ListPage{}, err
	}
	query, args := Query(src.Dialect, src.Table, b)
	var page idem.ListPage
	var readErr error
	err = src.Query(ctx, query, args, func(rows Rows) error {
		page, readErr = Read(rows, b, src.Pkg, src.Err)
		return readErr
	})
	switch {
	case readErr != nil:
		return idem.ListPage{}, readErr // already the store's error
	case err != nil:
		return idem.ListPage{}, src.Err(err)
	}
	return page, nil
}
