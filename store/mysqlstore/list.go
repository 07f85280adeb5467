package mysqlstore

import (
	"context"
	"strconv"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/sqllist"
)

var _ idem.Lister = (*Store)(nil)

// List returns a page of records in key order (idem.Lister), for operators. It is one query, a
// range scan of the key's primary index (the prefix and the cursor bound it; keys are
// VARBINARY, compared byte for byte) stopped after Limit+1 matching rows; it reads only the
// first bytes of a stored response, for its status.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.ListPage, error) {
	return sqllist.List(ctx, sqllist.Source{
		Dialect: listDialect, Table: s.name, Pkg: "mysqlstore", Ready: s.ready, Query: sqllist.SQL(s.db),
		Err: func(err error) error { return opErr("list", err) },
	}, q)
}

// listDialect is MySQL's: keys are VARBINARY, passed as bytes so they compare byte for byte.
var listDialect = sqllist.Dialect{
	Key:    "`key`",
	Head:   func(n int) string { return "SUBSTRING(response, 1, " + strconv.Itoa(n) + ")" },
	Param:  sqllist.Question,
	KeyArg: func(k string) any { return []byte(k) },
	Starts: "starts",
}
