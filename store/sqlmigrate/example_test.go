package sqlmigrate_test

import (
	"fmt"

	"github.com/idemkit/idem/store/sqlmigrate"
)

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
