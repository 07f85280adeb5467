// Command idem puts idempotency in front of any HTTP API: a reverse proxy with
// Idempotency-Key semantics, and the tools to run it. `idem help` lists the subcommands;
// `idem demo` shows it working on a fresh machine.
package main

import (
	"context"
	"os"

	"github.com/idemkit/idem/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
