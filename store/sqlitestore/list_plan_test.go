package sqlitestore

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/sqllist"
	"github.com/idemkit/idem/store/storekit"
)

// TestListUsesKeyIndex checks that a listing is a range scan of the key's index in key order:
// no full scan of the table, no sort of its rows.
func TestListUsesKeyIndex(t *testing.T) {
	t.Parallel()
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := storekit.Bounds(idem.ListQuery{Prefix: "scope\x1fab", State: idem.StateInProgress, CreatedBefore: time.Now(), Cursor: storekit.ListCursor("scope\x1fab1")})
	if err != nil {
		t.Fatal(err)
	}
	q, args := sqllist.Query(listDialect, `"`+st.table+`"`, b)
	rs, err := st.r.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var plan []string
	for rs.Next() {
		var id, parent, unused int
		var detail string
		if err := rs.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	p := strings.Join(plan, "; ")
	if !strings.Contains(p, "USING INDEX") || !strings.Contains(p, "key>") || strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("listing plan %q: want a range search of the key index, no sort", p)
	}
}
