package sqlitestore

import (
	"context"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/sqllist"
)

var _ idem.Lister = (*Store)(nil)

// List returns a page of records in key order (idem.Lister), for operators. It is one query on
// a reader connection, a range scan of the key's primary index (the prefix and the cursor
// bound it) stopped after Limit+1 matching rows; it reads only the first bytes of a stored
// response, for its status.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.ListPage, error) {
	return sqllist.List(ctx, sqllist.Source{
		Dialect: listDialect, Table: `"` + s.table + `"`, Pkg: "sqlitestore", Ready: s.ready, Query: sqllist.SQL(s.r),
		Err: func(err error) error { return s.fail("list", err) },
	}, q)
}

// listDialect is SQLite's (keys are TEXT under the default BINARY collation).
var listDialect = sqllist.Dialect{
	Key:    "key",
	Head:   func(n int) string { return "substr(response, 1, " + strconv.Itoa(n) + ")" },
	Param:  sqllist.Question,
	Starts: "starts",
}
