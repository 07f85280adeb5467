// Command idembench runs idem's load benchmarks and the servers they put under load.
//
// # Reports
//
//	idembench gateway    --idem BIN [--postgres URL] [--out FILE] ...   issue 6: gateway vs bare hop, pgbench, memory
//	idembench middleware [--out FILE] ...                               issue 9: idemhttp vs Fiber's idempotency middleware
//	idembench load       --url URL [--mode nokey|newkey|replay] ...     one load run, printed
//
// # Servers (started by the reports, one process each)
//
//	idembench serve-upstream  --listen ADDR [--delay D]
//	idembench serve-bareproxy --listen ADDR --upstream URL
//	idembench serve-target    --listen ADDR --target nethttp|nethttp-idem|fiber|fiber-idem
//	idembench serve-pggateway --listen ADDR --upstream URL --store POSTGRES_URL
//
// Run `idembench COMMAND -h` for each command's flags. scripts/bench-gateway.sh and
// scripts/bench.sh build and run it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemkit/idem/bench/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := harness.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "idembench:", err)
		os.Exit(1)
	}
}
