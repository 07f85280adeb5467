package idem_test

import (
	"fmt"

	"github.com/idemkit/idem"
)

// Two tenants' keys never meet: the scope is joined to the key with a separator that scopes
// cannot contain, so "billing" + "eu/1" and "billing/eu" + "1" are two records.
func ExampleScopedKey() {
	for _, p := range [][2]string{{"billing", "eu/1"}, {"billing/eu", "1"}} {
		if err := idem.CheckScope(p[0]); err != nil {
			panic(err)
		}
		k := idem.ScopedKey(p[0], p[1])
		scope, key, _ := idem.SplitScopedKey(k)
		fmt.Printf("%s -> scope %q, key %q\n", k, scope, key)
	}
	fmt.Println(idem.CheckScope("billing|eu"))
	// Output:
	// billing|eu/1 -> scope "billing", key "eu/1"
	// billing/eu|1 -> scope "billing/eu", key "1"
	// idem: invalid input: scope contains the scope separator '|' at byte 7
}
