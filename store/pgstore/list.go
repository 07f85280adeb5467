package pgstore

import (
	"context"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/sqllist"
)

var _ idem.Lister = (*Store)(nil)

// List returns a page of records in key order (idem.Lister), for operators. It is one query, a
// range scan of the key's primary index (the prefix and the cursor bound it; keys compare
// byte for byte, COLLATE "C") stopped after Limit+1 matching rows; it reads only the first
// bytes of a stored response, for its status.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.ListPage, error) {
	return sqllist.List(ctx, sqllist.Source{
		Dialect: listDialect, Table: s.name, Pkg: "pgstore", Ready: s.ready,
		Err: func(err error) error { return opErr("list", err) },
		Query: func(ctx context.Context, query string, args []any, read func(sqllist.Rows) error) error {
			rows, err := s.pool.Query(ctx, query, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			return read(rows)
		},
	}, q)
}

// listDialect is PostgreSQL's: keys compare byte for byte (COLLATE "C" on the column).
var listDialect = sqllist.Dialect{
	Key:    "key",
	Head:   func(n int) string { return "substring(response from 1 for " + strconv.Itoa(n) + ")" },
	Param:  sqllist.Dollar,
	Starts: "starts",
}
