package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

var _ idem.Lister = (*Store)(nil)

// List returns a page of records in key order (idem.Lister), for operators. It is one query on
// a reader connection, a range scan of the key's primary index (the prefix and the cursor
// bound it) stopped after Limit+1 matching rows; it reads only the first bytes of a stored
// response, for its status.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.ListPage, error) {
	b, err := q.Bounds()
	if err != nil {
		return idem.ListPage{}, err
	}
	if err := s.ready(ctx); err != nil {
		return idem.ListPage{}, err
	}
	query, args := listQuery(s.table, b)
	rs, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return idem.ListPage{}, s.fail("list", err)
	}
	defer rs.Close()
	recs := make([]idem.Record, 0, min(b.Limit+1, 64))
	for rs.Next() {
		var r idem.Record
		var state int64
		var head []byte
		var completed sql.NullInt64
		var lease, created, expires int64
		if err := rs.Scan(&r.Key, &r.Fingerprint, &state, &r.Token, &lease, &r.Attempts, &head, &created, &completed, &expires); err != nil {
			return idem.ListPage{}, s.fail("list", err)
		}
		r.State = idem.State(state)
		r.LeaseUntil, r.CreatedAt, r.ExpiresAt = time.UnixMicro(lease), time.UnixMicro(created), time.UnixMicro(expires)
		if err := idem.ListedRecord(&r, head, completed.Int64); err != nil {
			return idem.ListPage{}, fmt.Errorf("sqlitestore: list: %w", err)
		}
		recs = append(recs, r)
	}
	if err := rs.Err(); err != nil {
		return idem.ListPage{}, s.fail("list", err)
	}
	return b.Page(recs), nil
}

// listQuery returns the SELECT of a listing page and its arguments: Limit+1 rows, so that a
// page knows whether another follows.
func listQuery(table string, b idem.ListBounds) (string, []any) {
	var sb strings.Builder
	sb.WriteString(`SELECT key, fingerprint, state, token, lease_until, attempts, substr(response, 1, ` +
		strconv.Itoa(idem.ListResponseHeadLen) + `), created_at, completed_at, expires_at FROM "` + table + `" WHERE key >= ?`)
	args := []any{b.From}
	if b.To != "" {
		sb.WriteString(` AND key < ?`)
		args = append(args, b.To)
	}
	if b.HasAfter {
		sb.WriteString(` AND key > ?`)
		args = append(args, b.After)
	}
	if b.State != 0 {
		sb.WriteString(` AND state = ?`)
		args = append(args, int64(b.State))
	}
	if b.CreatedBefore != 0 {
		sb.WriteString(` AND created_at < ?`)
		args = append(args, b.CreatedBefore)
	}
	sb.WriteString(` ORDER BY key LIMIT ?`)
	return sb.String(), append(args, b.Limit+1)
}
