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
	b, err := q.Bounds()
	if err != nil {
		return idem.ListPage{}, err
	}
	if err := s.ready(ctx); err != nil {
		return idem.ListPage{}, err
	}
	query, args := sqllist.Query(listDialect, `"`+s.table+`"`, b)
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return idem.ListPage{}, s.fail("list", err)
	}
	defer rows.Close()
	return sqllist.Read(rows, b, "sqlitestore", func(err error) error { return s.fail("list", err) })
}

// listDialect is SQLite's (keys are TEXT under the default BINARY collation).
var listDialect = sqllist.Dialect{
	Key:   "key",
	Head:  func(n int) string { return "substr(response, 1, " + strconv.Itoa(n) + ")" },
	Param: sqllist.Question,
}
