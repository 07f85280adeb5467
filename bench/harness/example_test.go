package harness_test

import (
	"context"
	"os"

	"github.com/idemkit/idem/bench/harness"
)

// The gateway benchmark, as scripts/bench-gateway.sh runs it (without PostgreSQL here).
func ExampleRunGateway() {
	self, _ := os.Executable()
	err := harness.RunGateway(context.Background(), harness.GatewayOptions{
		IdemBin:  "bin/idem",  // go build -o bin/idem ./cmd/idem
		SelfBin:  self,        // the idembench binary
		InFlight: []int{5000}, // peak memory with 5,000 keys in flight
	}, os.Stdout, os.Stderr)
	if err != nil {
		panic(err)
	}
}
