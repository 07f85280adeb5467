package sqlmigrate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/sqlmigrate"
)

// Sweep deletes expired records in bounded batches; a Sweeper does it on an interval.
func ExampleSweep() {
	st := memstore.New()
	ctx := context.Background()
	now := time.Now()
	for _, k := range []string{"a", "b", "c"} {
		_, _ = st.Reserve(ctx, k, idem.Fingerprint(nil), now, time.Second, time.Minute)
	}
	n, err := sqlmigrate.Sweep(ctx, st, now.Add(time.Hour), 2, 10, time.Second)
	fmt.Println(n, err, st.Len())
	// Output: 3 <nil> 0
}

// Migrations are numbered files; Statements splits one for drivers that run one statement
// per call.
func ExampleStatements() {
	sql := sqlmigrate.Expand("CREATE TABLE {{table}} (k int);\nCREATE INDEX i ON {{table}} (k);\n",
		map[string]string{"table": "`idem_records`"})
	for _, s := range sqlmigrate.Statements(sql) {
		fmt.Println(s)
	}
	// Output:
	// CREATE TABLE `idem_records` (k int)
	// CREATE INDEX i ON `idem_records` (k)
}
