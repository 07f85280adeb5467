package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

var _ idem.Lister = (*Store)(nil)

// List returns a page of records in key order (idem.Lister), for operators. It is one query, a
// range scan of the key's primary index (the prefix and the cursor bound it; keys compare
// byte for byte, COLLATE "C") stopped after Limit+1 matching rows; it reads only the first
// bytes of a stored response, for its status.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.ListPage, error) {
	b, err := q.Bounds()
	if err != nil {
		return idem.ListPage{}, err
	}
	if err := s.ready(ctx); err != nil {
		return idem.ListPage{}, err
	}
	query, args := listQuery(s.name, b)
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return idem.ListPage{}, opErr("list", err)
	}
	defer rows.Close()
	recs := make([]idem.Record, 0, min(b.Limit+1, 64))
	for rows.Next() {
		var r idem.Record
		var state int16
		var attempts int32
		var head []byte
		var lease, created, completed, expires int64
		if err := rows.Scan(&r.Key, &r.Fingerprint, &state, &r.Token, &lease, &attempts, &head, &created, &completed, &expires); err != nil {
			return idem.ListPage{}, opErr("list", err)
		}
		r.State, r.Attempts = idem.State(state), int(attempts)
		r.LeaseUntil, r.CreatedAt, r.ExpiresAt = time.UnixMicro(lease), time.UnixMicro(created), time.UnixMicro(expires)
		if err := idem.ListedRecord(&r, head, completed); err != nil {
			return idem.ListPage{}, fmt.Errorf("pgstore: list: %w", err)
		}
		recs = append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return idem.ListPage{}, opErr("list", err)
	}
	return b.Page(recs), nil
}

// listQuery returns the SELECT of a listing page of table (quoted) and its arguments:
// Limit+1 rows, so that a page knows whether another follows.
func listQuery(table string, b idem.ListBounds) (string, []any) {
	var sb strings.Builder
	sb.WriteString(`SELECT key, fingerprint, state, token, lease_until, attempts, substring(response from 1 for ` +
		strconv.Itoa(idem.ListResponseHeadLen) + `), created_at, completed_at, expires_at FROM ` + table + ` WHERE key >= $1`)
	args := []any{b.From}
	add := func(cond string, v any) {
		args = append(args, v)
		sb.WriteString(` AND ` + cond + ` $` + strconv.Itoa(len(args)))
	}
	if b.To != "" {
		add(`key <`, b.To)
	}
	if b.HasAfter {
		add(`key >`, b.After)
	}
	if b.State != 0 {
		add(`state =`, int16(b.State))
	}
	if b.CreatedBefore != 0 {
		add(`created_at <`, b.CreatedBefore)
	}
	args = append(args, b.Limit+1)
	sb.WriteString(` ORDER BY key LIMIT $` + strconv.Itoa(len(args)))
	return sb.String(), args
}
