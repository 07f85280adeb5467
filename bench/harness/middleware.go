package harness

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/idemkit/idem/bench/load"
)

// MiddlewareOptions configure RunMiddleware. Only SelfBin is required.
type MiddlewareOptions struct {
	// SelfBin is the idembench binary, started once per target. Required.
	SelfBin string
	// Dir receives the servers' logs. Default: a new temporary directory, removed at the end.
	Dir string
	// Clients is the number of concurrent keep-alive clients. Default 64.
	Clients int
	// Requests is the number of requests of each measured run. Default 40,000.
	Requests int64
	// Rounds is how many times every case runs, interleaved. Default 3.
	Rounds int
	// Procs is the GOMAXPROCS of every server. Default 1 (the load generator keeps the other
	// core of a 2-core machine).
	Procs int
	// Command is the command line shown in the report. Default: this process's arguments.
	Command string
}

func (o MiddlewareOptions) withDefaults() (MiddlewareOptions, error) {
	o.Clients = cmp.Or(o.Clients, 64)
	o.Requests = cmp.Or(o.Requests, 40_000)
	o.Rounds = cmp.Or(o.Rounds, 3)
	o.Procs = cmp.Or(o.Procs, 1)
	o.Command = cmp.Or(o.Command, strings.Join(os.Args, " "))
	switch {
	case o.SelfBin == "":
		return o, fmt.Errorf("%w: MiddlewareOptions.SelfBin is required", ErrConfig)
	case o.Clients < 1 || o.Requests < 1 || o.Rounds < 1 || o.Procs < 1:
		return o, fmt.Errorf("%w: MiddlewareOptions.Clients, Requests, Rounds and Procs must be positive", ErrConfig)
	}
	return o, nil
}

// mwCase is one target under one load mode.
type mwCase struct {
	target string
	mode   load.Mode
	proc   *Proc
	served int64         // requests the server answered, priming included
	cpu    time.Duration // the server's CPU time over those
	fig    *figure
}

func (c *mwCase) cpuPerReq() float64 {
	if c.served == 0 {
		return 0
	}
	return float64(c.cpu.Nanoseconds()) / 1e3 / float64(c.served)
}

// RunMiddleware measures the CPU each idempotency middleware adds per request to its own bare
// server: idemhttp (memstore, engine cache on) over a bare net/http handler, and Fiber v2's
// idempotency middleware over bare Fiber, on the new-key and the replay paths, each target in
// its own process, under the same load, in one run. It writes the report, in Markdown, to out
// and progress lines to progress. It is bounded: every run has a request count and a time
// limit, and every process it starts is stopped before it returns.
func RunMiddleware(ctx context.Context, opt MiddlewareOptions, out, progress io.Writer) error {
	opt, err := opt.withDefaults()
	if err != nil {
		return err
	}
	started, machine := time.Now(), Machine()
	dir := opt.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "idembench-middleware-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	names := []string{TargetNetHTTP, TargetNetHTTPIdem, TargetFiber, TargetFiberIdem}
	procs := map[string]*Proc{}
	for _, t := range names {
		p, err := startProc(ctx, dir, t, opt.Procs, "", opt.SelfBin, "serve-target", "--listen", "{addr}", "--target", t)
		if err != nil {
			return err
		}
		defer p.Stop()
		procs[t] = p
	}
	var cases []*mwCase
	for _, mode := range []load.Mode{load.NewKey, load.Replay} {
		for _, t := range names {
			cases = append(cases, &mwCase{target: t, mode: mode, proc: procs[t],
				fig: &figure{name: t + " " + string(mode), cpu: map[string]time.Duration{}, status: map[int]int64{}}})
		}
	}
	fmt.Fprintln(progress, "middleware: idemhttp vs net/http, Fiber idempotency vs Fiber")
	for r := range opt.Rounds {
		fmt.Fprintf(progress, "round %d/%d\n", r+1, opt.Rounds)
		for _, c := range cases {
			if c.proc.Exited() {
				return fmt.Errorf("harness: %s has exited; see %s:\n%s", c.proc.Name, c.proc.log, tail(c.proc.log))
			}
			before, err := c.proc.CPU()
			if err != nil {
				return err
			}
			res, err := load.Run(ctx, load.Options{URL: c.proc.URL("/v1/charges"), Mode: c.mode, Clients: opt.Clients,
				Requests: opt.Requests, Duration: 5 * time.Minute, Timeout: 30 * time.Second})
			if err != nil {
				return fmt.Errorf("harness: %s: %w", c.fig.name, err)
			}
			after, err := c.proc.CPU()
			if err != nil {
				return err
			}
			c.cpu += after - before
			c.served += res.Requests
			if c.mode == load.Replay {
				c.served += int64(opt.Clients) // the priming requests, one per client
			}
			f := c.fig
			f.rates = append(f.rates, res.Throughput())
			f.lat.Merge(&res.Latency)
			f.requests += res.Requests
			f.errors += res.Errors
			f.replayed += res.Replayed
			if f.firstErr == "" {
				f.firstErr = res.FirstError
			}
			fmt.Fprintf(progress, "  %-22s %s, server CPU %.1f µs/req\n", f.name, res, float64((after-before).Nanoseconds())/1e3/float64(res.Requests))
		}
	}

	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Middleware: idemhttp and Fiber's idempotency middleware, each against its own bare server\n\n")
	p("Measured %s UTC, in %s. Machine: %s.\n\n", started.UTC().Format("2006-01-02 15:04"), time.Since(started).Round(time.Second), machine)
	p("Command: `%s`\n\n", opt.Command)
	p("Four servers, each its own process with GOMAXPROCS=%d, all answering POST with 201 and the same 86-byte JSON body: "+
		"a bare net/http handler; the same behind `idemhttp` (memstore, the engine's local cache of %d completed records on, "+
		"every other option at its default); bare Fiber v2 (%s); the same behind `github.com/gofiber/fiber/v2/middleware/idempotency` "+
		"(its in-memory lock and storage, key header Idempotency-Key). The same load generator (%d keep-alive clients, "+
		"GOMAXPROCS=%d) sends each %d requests per run with a 36-byte key: a new key each time, or one key per client replayed "+
		"(primed once before the run). %d rounds, every case once per round. CPU is the server process's user + system time "+
		"(/proc/PID/stat) over the run, divided by the requests it answered; the load generator's CPU is not counted.\n\n",
		opt.Procs, 10_000, fiberVersion(), opt.Clients, loadProcs(), opt.Requests, opt.Rounds)
	p("| path | server | bare CPU/req | with middleware | added CPU/req | added vs bare | req/s bare → with | p50 / p99 with | errors |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	added := map[string]float64{}
	for i := 0; i < len(cases); i += 2 {
		bare, mw := cases[i], cases[i+1]
		server := "net/http + idemhttp"
		if bare.target == TargetFiber {
			server = "Fiber + idempotency"
		}
		a := mw.cpuPerReq() - bare.cpuPerReq()
		added[string(bare.mode)+bare.target] = a
		p("| %s | %s | %.1f µs | %.1f µs | **%.1f µs** | %+.0f%% | %.0f → %.0f | %s / %s | %d |\n", bare.mode, server,
			bare.cpuPerReq(), mw.cpuPerReq(), a, 100*a/bare.cpuPerReq(), bare.fig.rate(), mw.fig.rate(),
			us(mw.fig.lat.Quantile(0.5)), us(mw.fig.lat.Quantile(0.99)), bare.fig.errors+mw.fig.errors)
	}
	p("\n")
	for _, mode := range []load.Mode{load.NewKey, load.Replay} {
		i, f := added[string(mode)+TargetNetHTTP], added[string(mode)+TargetFiber]
		if f > 0 {
			p("- %s: idemhttp adds %.1f µs of CPU per request, Fiber's middleware %.1f µs: idemhttp's added cost is %.2f× Fiber's.\n", mode, i, f, i/f)
		} else {
			p("- %s: idemhttp adds %.1f µs of CPU per request, Fiber's middleware %.1f µs.\n", mode, i, f)
		}
	}
	for _, c := range cases {
		if c.mode == load.Replay && (c.target == TargetNetHTTPIdem || c.target == TargetFiberIdem) {
			p("- %s replay runs: %d of %d answers were marked replayed (Idempotent-Replayed: true; Fiber's middleware does not send that header).\n", c.target, c.fig.replayed, c.fig.requests)
		}
		if c.fig.firstErr != "" {
			p("- first error in %s: `%s`\n", c.fig.name, c.fig.firstErr)
		}
	}
	p("\nWhat each buys for that CPU differs: idemhttp fingerprints every request (SHA-256 of method, path and body: " +
		"a reused key with another body gets 422), claims the key in the store before the handler runs (a concurrent duplicate " +
		"gets 409, across processes when the store is shared), captures and stores status, headers and body, and sets " +
		"Idempotent-Replayed on replays; Fiber's middleware takes an in-process lock on the key, runs the handler, then stores " +
		"the response (msgpack) under the key, with no fingerprint and no cross-process claim.\n\n")
	_, err = io.WriteString(out, b.String())
	return err
}

// fiberVersion returns the version of Fiber built into this binary.
func fiberVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/gofiber/fiber/v2" {
				return "github.com/gofiber/fiber/v2 " + d.Version
			}
		}
	}
	return "github.com/gofiber/fiber/v2"
}
