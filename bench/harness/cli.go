package harness

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/idemkit/idem/bench/load"
)

// Main runs the idembench command line: args are the arguments after the program name.
// Reports go to the file named by --out, or to stdout; progress goes to stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: a command is required: gateway, middleware, load, serve-upstream, serve-bareproxy, serve-target, serve-pggateway", ErrConfig)
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("idembench "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := func() *string { return fs.String("listen", "127.0.0.1:0", "address to serve on") }
	switch cmd {
	case "serve-upstream":
		addr := listen()
		delay := fs.Duration("delay", 0, "how long each answer waits")
		if err := fs.Parse(args); err != nil {
			return err
		}
		return quiet(ServeUpstream(ctx, *addr, *delay))
	case "serve-bareproxy":
		addr := listen()
		up := fs.String("upstream", "", "upstream URL (required)")
		h2c := fs.Bool("h2c", false, "also accept HTTP/2 without TLS")
		if err := fs.Parse(args); err != nil {
			return err
		}
		return quiet(ServeBareProxy(ctx, *addr, *up, *h2c))
	case "serve-target":
		addr := listen()
		t := fs.String("target", "", "nethttp, nethttp-idem, fiber or fiber-idem")
		if err := fs.Parse(args); err != nil {
			return err
		}
		return quiet(ServeTarget(ctx, *addr, *t))
	case "serve-pggateway":
		addr := listen()
		up := fs.String("upstream", "", "upstream URL (required)")
		store := fs.String("store", "", "PostgreSQL URL (required)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		return quiet(ServePGGateway(ctx, *addr, *up, *store))
	case "gateway":
		var o GatewayOptions
		out := fs.String("out", "", "write the Markdown report to this file (default stdout)")
		fs.StringVar(&o.IdemBin, "idem", "", "the built idem binary (required)")
		fs.StringVar(&o.Dir, "dir", "", "keep the processes' logs in this directory (default: a temporary one, removed at the end)")
		fs.IntVar(&o.Clients, "clients", 0, "concurrent clients (default 64)")
		fs.DurationVar(&o.Duration, "duration", 0, "length of each measured run (default 3s)")
		fs.DurationVar(&o.Warmup, "warmup", 0, "warm-up before each run (default 500ms)")
		fs.IntVar(&o.Rounds, "rounds", 0, "rounds, interleaved (default 3)")
		fs.IntVar(&o.ProxyProcs, "proxy-procs", 0, "GOMAXPROCS of the proxies (default 2)")
		fs.IntVar(&o.UpstreamProcs, "upstream-procs", 0, "GOMAXPROCS of the upstream (default 1)")
		fs.StringVar(&o.PostgresURL, "postgres", "", "PostgreSQL URL for the PostgreSQL figures (default: none)")
		fs.IntVar(&o.PGConns, "pg-conns", 0, "connections of the gateway's pool and of pgbench (default 16)")
		inflight := fs.String("inflight", "", "comma-separated numbers of keys in flight for the memory test (default 2000,5000,10000; 0 skips it)")
		fs.DurationVar(&o.InFlightDelay, "inflight-delay", 0, "upstream delay in the memory test (default 10s)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		var err error
		if o.InFlight, err = ints(*inflight); err != nil {
			return err
		}
		if o.SelfBin, err = os.Executable(); err != nil {
			return err
		}
		o.Command = command(cmd, args)
		return report(*out, stdout, func(w io.Writer) error { return RunGateway(ctx, o, w, stderr) })
	case "middleware":
		var o MiddlewareOptions
		out := fs.String("out", "", "write the Markdown report to this file (default stdout)")
		fs.IntVar(&o.Clients, "clients", 0, "concurrent clients (default 64)")
		fs.Int64Var(&o.Requests, "requests", 0, "requests per run (default 40000)")
		fs.IntVar(&o.Rounds, "rounds", 0, "rounds, interleaved (default 3)")
		fs.IntVar(&o.Procs, "procs", 0, "GOMAXPROCS of each server (default 1)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		var err error
		if o.SelfBin, err = os.Executable(); err != nil {
			return err
		}
		o.Command = command(cmd, args)
		return report(*out, stdout, func(w io.Writer) error { return RunMiddleware(ctx, o, w, stderr) })
	case "load":
		var o load.Options
		fs.StringVar(&o.URL, "url", "", "target URL (required)")
		mode := fs.String("mode", "nokey", "nokey, newkey or replay")
		fs.IntVar(&o.Clients, "clients", 0, "concurrent clients (default 64)")
		fs.DurationVar(&o.Duration, "duration", 0, "measured window (default 5s)")
		fs.DurationVar(&o.Warmup, "warmup", 0, "warm-up, not counted (default 0)")
		fs.Int64Var(&o.Requests, "requests", 0, "stop after this many requests (default: no limit)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		o.Mode = load.Mode(*mode)
		res, err := load.Run(ctx, o)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, res)
		return err
	}
	return fmt.Errorf("%w: unknown command %q", ErrConfig, cmd)
}

// quiet turns the end of a server by a signal into success.
func quiet(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func report(path string, stdout io.Writer, run func(io.Writer) error) error {
	if path == "" {
		return run(stdout)
	}
	var b strings.Builder
	if err := run(&b); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func ints(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	out := []int{}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%w: --inflight: %q is not a number", ErrConfig, f)
		}
		if n > 0 {
			out = append(out, n)
		}
	}
	return out, nil
}

func command(cmd string, args []string) string {
	return strings.TrimSpace("idembench " + cmd + " " + strings.Join(args, " "))
}
