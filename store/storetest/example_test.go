package storetest_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/storetest"
)

// A backend's conformance test is a constructor and a call; the constructor returns a store
// isolated from every other subtest's (its own table, schema or key prefix).
func ExampleRun() {
	conformance := func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) idem.Store { return memstore.New() })
	}
	_ = conformance // in a _test.go file: func TestConformance(t *testing.T) { ... }
}
