package harness

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/bench/load"
	"github.com/idemkit/idem/bench/procstat"
	"github.com/idemkit/idem/bench/targets"
	"github.com/idemkit/idem/store/storekit"
)

// GatewayOptions configure RunGateway. Only IdemBin and SelfBin are required.
type GatewayOptions struct {
	// IdemBin is the built idem binary (go build -o ... ./cmd/idem). Required.
	IdemBin string
	// SelfBin is the idembench binary, started for the upstream, the bare proxy and (when
	// idem serve cannot open postgres:// URLs) the PostgreSQL gateway. Required.
	SelfBin string
	// Dir receives the processes' logs. Default: a new temporary directory, removed at the end.
	Dir string
	// Clients is the number of concurrent keep-alive clients. Default 64.
	Clients int
	// Duration is each measured run's length. Default 3s.
	Duration time.Duration
	// Warmup precedes each measured run, with the same load, not counted. Default 500ms.
	Warmup time.Duration
	// Rounds is how many times every case runs, interleaved. Default 3.
	Rounds int
	// ProxyProcs is the GOMAXPROCS of the bare proxy and the gateway; UpstreamProcs the
	// upstream's. The load generator runs in the calling process with its own GOMAXPROCS.
	// Default 2 and 1.
	ProxyProcs, UpstreamProcs int
	// PostgresURL, if set, adds the PostgreSQL figures: the gateway on pgstore against pgbench
	// running the same two statements. The harness works in its own schema (idem_gwbench),
	// dropped at the end. Default "": no PostgreSQL figures.
	PostgresURL string
	// PGConns is the number of connections both the gateway's pool and pgbench use; the
	// gateway gets 2 × PGConns HTTP clients so its pool stays busy. Default 16.
	PGConns int
	// InFlight lists the numbers of concurrent in-flight keys at which peak memory is
	// measured. Default 2000, 5000, 10000. Each in-flight request holds two sockets in the
	// proxy: the harness raises its limit on open files (inherited by the proxies) as far as
	// it may, and a number that still does not fit is lowered to the largest that does, and
	// reported as such.
	InFlight []int
	// InFlightDelay is how long the slow upstream holds each request in the memory test.
	// Default 10s.
	InFlightDelay time.Duration
	// Command is the command line shown in the report. Default: this process's arguments.
	Command string
}

func (o GatewayOptions) withDefaults() (GatewayOptions, error) {
	o.Clients = cmp.Or(o.Clients, 64)
	o.Duration = cmp.Or(o.Duration, 3*time.Second)
	o.Warmup = cmp.Or(o.Warmup, 500*time.Millisecond)
	o.Rounds = cmp.Or(o.Rounds, 3)
	o.ProxyProcs = cmp.Or(o.ProxyProcs, 2)
	o.UpstreamProcs = cmp.Or(o.UpstreamProcs, 1)
	o.PGConns = cmp.Or(o.PGConns, 16)
	o.InFlightDelay = cmp.Or(o.InFlightDelay, 10*time.Second)
	if o.InFlight == nil {
		o.InFlight = []int{2000, 5000, 10000}
	}
	o.Command = cmp.Or(o.Command, strings.Join(os.Args, " "))
	switch {
	case o.IdemBin == "":
		return o, fmt.Errorf("%w: GatewayOptions.IdemBin is required", ErrConfig)
	case o.SelfBin == "":
		return o, fmt.Errorf("%w: GatewayOptions.SelfBin is required", ErrConfig)
	case o.Clients < 1 || o.Rounds < 1 || o.PGConns < 1:
		return o, fmt.Errorf("%w: GatewayOptions.Clients, Rounds and PGConns must be positive", ErrConfig)
	case o.Duration < 100*time.Millisecond:
		return o, fmt.Errorf("%w: GatewayOptions.Duration %s is below 100ms", ErrConfig, o.Duration)
	}
	for _, n := range o.InFlight {
		if n < 1 || n > 100_000 {
			return o, fmt.Errorf("%w: GatewayOptions.InFlight %d is not between 1 and 100000", ErrConfig, n)
		}
	}
	return o, nil
}

type gatewayRun struct {
	opt      GatewayOptions
	dir      string
	progress io.Writer
	started  time.Time
	machine  string

	mem      []*figure // bare (every run), nokey, newkey, replay
	memPairs []*figure // for each of mem, the bare runs made just before its runs (nil for bare)
	pg       []*figure // pgbench, gateway newkey, gateway replay
	pgHost   string    // "idem serve" or the fallback
	pgNote   string
	pgbench  []pgbenchRun
	pgCPU    []pgCPU // pgbench, then the gateway's cases
	// pgCPUSeen: the PostgreSQL server's processes are visible here, so its CPU is measured.
	pgCPUSeen bool
	inflight  []inflightRun
	nofile    fdLimit
}

// RunGateway measures the idem gateway (the idem serve binary) against a bare, tuned
// httputil.ReverseProxy to the same upstream, in one run: pass-through, new key and replay
// on the memory store; new key on PostgreSQL against pgbench; and peak memory with many keys in
// flight. It writes the report, in Markdown, to out and progress lines to progress. It is
// bounded: every run has a duration, every wait a timeout, and every process it starts is
// stopped before it returns.
func RunGateway(ctx context.Context, opt GatewayOptions, out, progress io.Writer) error {
	opt, err := opt.withDefaults()
	if err != nil {
		return err
	}
	g := &gatewayRun{opt: opt, progress: progress, started: time.Now(), machine: Machine()}
	g.dir = opt.Dir
	if g.dir == "" {
		if g.dir, err = os.MkdirTemp("", "idembench-gateway-"); err != nil {
			return err
		}
		defer os.RemoveAll(g.dir)
	}
	if err := g.memory(ctx); err != nil {
		return err
	}
	if opt.PostgresURL != "" {
		if err := g.postgres(ctx); err != nil {
			return err
		}
	}
	if err := g.memoryInFlight(ctx); err != nil {
		return err
	}
	return g.report(out)
}

func (g *gatewayRun) upstream(ctx context.Context, name string, delay time.Duration) (*Proc, error) {
	return startProc(ctx, g.dir, name, g.opt.UpstreamProcs, targets.StatsPath, g.opt.SelfBin,
		"serve-upstream", "--listen", "{addr}", "--delay", delay.String())
}

func (g *gatewayRun) bareProxy(ctx context.Context, name string, up *Proc, extra ...string) (*Proc, error) {
	return startProc(ctx, g.dir, name, g.opt.ProxyProcs, targets.StatsPath, g.opt.SelfBin,
		append([]string{"serve-bareproxy", "--listen", "{addr}", "--upstream", up.URL("")}, extra...)...)
}

func (g *gatewayRun) gateway(ctx context.Context, name string, up *Proc, store string, extra ...string) (*Proc, error) {
	args := append([]string{"serve", "--listen", "{addr}", "--upstream", up.URL(""), "--store", store, "--scope", "none"}, extra...)
	var env []string
	if dir := os.Getenv("IDEMBENCH_CPUPROFILE_DIR"); dir != "" {
		env = append(env, "IDEM_CPUPROFILE="+filepath.Join(dir, name+".prof"))
	}
	return startProcEnv(ctx, g.dir, name, g.opt.ProxyProcs, env, "/healthz", g.opt.IdemBin, args...)
}

func (g *gatewayRun) load(url string, mode load.Mode, clients int) load.Options {
	return load.Options{URL: url, Mode: mode, Clients: clients, Duration: g.opt.Duration, Warmup: g.opt.Warmup, Timeout: 30 * time.Second}
}

// memory: bare hop vs gateway on the memory store, all three modes, each right after a run of
// the bare hop, interleaved.
//
// Every case of every round gets a proxy process of its own, started before its warm-up and
// stopped after its run: the memory store keeps every record in the gateway's heap, so a
// gateway shared by the cases would make each case pay the garbage collection of the records
// the new-key runs before it left behind (hundreds of thousands after a few rounds), and the
// figures would depend on the order of the cases. A new-key run still pays for the records it
// stores itself, as a real gateway does from its start. The upstream is stateless and shared.
func (g *gatewayRun) memory(ctx context.Context) error {
	fmt.Fprintln(g.progress, "gateway: memory store against the bare hop (a fresh proxy process for every case and round)")
	up, err := g.upstream(ctx, "upstream", 0)
	if err != nil {
		return err
	}
	defer up.Stop()
	bare := func(ctx context.Context) (*Proc, error) { return g.bareProxy(ctx, "bareproxy", up) }
	gw := func(ctx context.Context) (*Proc, error) { return g.gateway(ctx, "gateway-memory", up, "memory://") }
	cases := []freshCase{
		{name: "gateway, no key (pass-through)", mode: load.NoKey, start: gw},
		{name: "gateway, new key, memory store", mode: load.NewKey, start: gw},
		{name: "gateway, replay, memory store", mode: load.Replay, start: gw},
	}
	baseline := freshCase{name: "bare hop (tuned ReverseProxy)", mode: load.NoKey, start: bare}
	figs, pairs, err := g.pairedRounds(ctx, baseline, cases, up)
	if err != nil {
		return err
	}
	g.mem = append([]*figure{mergeFigures(baseline.name, pairs)}, figs...)
	g.memPairs = append([]*figure{nil}, pairs...)
	return nil
}

// freshCase is a case measured on a proxy process started for it alone.
type freshCase struct {
	name  string
	mode  load.Mode
	start func(context.Context) (*Proc, error)
}

// pairedRounds runs, in every round, each case right after a run of the baseline, each run on
// a new proxy process (named the same every time, so its CPU adds up under one name), and
// charges the proxy's and up's CPU. A case's ratio is then taken against the baseline run
// just before it, seconds apart, which on a shared machine whose load drifts is the closest
// comparison. It returns the cases' figures and, for each, its baseline runs.
func (g *gatewayRun) pairedRounds(ctx context.Context, baseline freshCase, cases []freshCase, up *Proc) (figs, pairs []*figure, err error) {
	const path = "/v1/charges"
	newFig := func(name string) *figure {
		return &figure{name: name, cpu: map[string]time.Duration{}, status: map[int]int64{}}
	}
	for _, c := range cases {
		figs = append(figs, newFig(c.name))
		pairs = append(pairs, newFig(baseline.name))
	}
	run := func(c freshCase, f *figure) error {
		px, err := c.start(ctx)
		if err != nil {
			return err
		}
		k := kase{name: c.name, opt: g.load(px.URL(path), c.mode, g.opt.Clients), cpu: []*Proc{px, up}}
		err = runOnce(ctx, k, f, g.progress)
		px.Stop()
		if err != nil {
			return err
		}
		return ctx.Err()
	}
	for r := range g.opt.Rounds {
		fmt.Fprintf(g.progress, "round %d/%d\n", r+1, g.opt.Rounds)
		for i, c := range cases {
			if err := run(baseline, pairs[i]); err != nil {
				return nil, nil, err
			}
			if err := run(c, figs[i]); err != nil {
				return nil, nil, err
			}
		}
	}
	return figs, pairs, nil
}

// mergeFigures returns one figure holding every run of figs.
func mergeFigures(name string, figs []*figure) *figure {
	m := &figure{name: name, cpu: map[string]time.Duration{}, status: map[int]int64{}}
	for _, f := range figs {
		m.rates = append(m.rates, f.rates...)
		m.lat.Merge(&f.lat)
		m.requests += f.requests
		m.errors += f.errors
		m.replayed += f.replayed
		if m.firstErr == "" {
			m.firstErr = f.firstErr
		}
		for k, v := range f.cpu {
			m.cpu[k] += v
		}
		for k, v := range f.status {
			m.status[k] += v
		}
	}
	return m
}

// pgSchema is the schema the PostgreSQL figures work in; dropped at the end.
const pgSchema = "idem_gwbench"

// postgres: the gateway on PostgreSQL against pgbench running the same two statements.
func (g *gatewayRun) postgres(ctx context.Context) error {
	fmt.Fprintln(g.progress, "gateway: PostgreSQL against pgbench")
	if _, err := exec.LookPath("pgbench"); err != nil {
		return fmt.Errorf("harness: pgbench is not installed (Debian: postgresql-client): %w", err)
	}
	conn, err := pgx.Connect(ctx, g.opt.PostgresURL)
	if err != nil {
		return fmt.Errorf("harness: PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = conn.Exec(ctx, "SET client_min_messages = warning; DROP SCHEMA IF EXISTS "+pgSchema+" CASCADE")
	}
	drop()
	defer drop()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgSchema); err != nil {
		return err
	}
	storeURL, err := withParams(g.opt.PostgresURL, map[string]string{"search_path": pgSchema, "pool_max_conns": strconv.Itoa(g.opt.PGConns)})
	if err != nil {
		return err
	}

	up, err := g.upstream(ctx, "upstream-pg", 0)
	if err != nil {
		return err
	}
	defer up.Stop()
	g.pgHost = "idem serve"
	gw, err := g.gateway(ctx, "gateway-postgres", up, storeURL)
	if err != nil {
		fmt.Fprintf(g.progress, "  idem serve cannot run on PostgreSQL (%v)\n  using the gateway package on pgstore in idembench instead\n", firstLine(err.Error()))
		g.pgHost = "idembench serve-pggateway"
		g.pgNote = lastLine(tail(g.dir + "/gateway-postgres.log"))
		gw, err = startProc(ctx, g.dir, "pggateway", g.opt.ProxyProcs, "/healthz", g.opt.SelfBin,
			"serve-pggateway", "--listen", "{addr}", "--upstream", up.URL(""), "--store", storeURL)
		if err != nil {
			return err
		}
	}
	defer gw.Stop()
	// The same gateway with each claim and completion its own statement and transaction
	// (group_commit=0), as pgbench runs them: how much the default's grouping gains.
	ungroupedURL, err := withParams(storeURL, map[string]string{"group_commit": "0"})
	if err != nil {
		return err
	}
	gw0, err := g.gateway(ctx, "gateway-postgres-ungrouped", up, ungroupedURL)
	if err != nil {
		return err
	}
	defer gw0.Stop()
	// The records table exists now (the gateway migrated it): pgbench's goes beside it.
	script, err := g.pgbenchScript(ctx, conn)
	if err != nil {
		return err
	}
	pgClients := 2 * g.opt.PGConns
	path := "/v1/charges"
	cases := []kase{
		{name: "gateway, new key, PostgreSQL", opt: g.load(gw.URL(path), load.NewKey, pgClients), cpu: []*Proc{gw, up}},
		{name: "gateway, replay, PostgreSQL", opt: g.load(gw.URL(path), load.Replay, pgClients), cpu: []*Proc{gw, up}},
		{name: "gateway, new key, PostgreSQL, group_commit=0", opt: g.load(gw0.URL(path), load.NewKey, pgClients), cpu: []*Proc{gw0, up}},
	}
	pgb := &figure{name: "pgbench, the same two statements", cpu: map[string]time.Duration{}, status: map[int]int64{}}
	figs := make([]*figure, len(cases))
	for i, c := range cases {
		figs[i] = &figure{name: c.name, cpu: map[string]time.Duration{}, status: map[int]int64{}}
	}
	// Where the CPU goes, per operation, in each case: what it takes on 2 shared cores.
	g.pgCPU = make([]pgCPU, 1+len(cases))
	_, g.pgCPUSeen = postgresCPU()
	for r := range g.opt.Rounds {
		fmt.Fprintf(g.progress, "round %d/%d\n", r+1, g.opt.Rounds)
		srv0, _ := postgresCPU()
		pr, err := g.runPgbench(ctx, script)
		if err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond) // the postmaster reaps pgbench's backends
		srv1, _ := postgresCPU()
		g.pgCPU[0].server += srv1 - srv0
		g.pgCPU[0].client += pr.cpu
		g.pgCPU[0].ops += float64(pr.transactions)
		g.pgbench = append(g.pgbench, pr)
		pgb.rates = append(pgb.rates, pr.tps)
		fmt.Fprintf(g.progress, "  %-40s %.0f TPS, average latency %.3f ms\n", pgb.name, pr.tps, pr.latencyMS)
		for i, c := range cases {
			srv0, _ := postgresCPU()
			self0, _ := procstat.CPU(0)
			gwp := c.cpu[0]
			gwCPU0, up0 := figs[i].cpu[gwp.Name], figs[i].cpu[up.Name]
			n0 := figs[i].requests
			if err := runOnce(ctx, c, figs[i], g.progress); err != nil {
				return err
			}
			srv1, _ := postgresCPU()
			self1, _ := procstat.CPU(0)
			x := &g.pgCPU[1+i]
			x.server += srv1 - srv0
			x.client += self1 - self0
			x.gateway += figs[i].cpu[gwp.Name] - gwCPU0
			x.up += figs[i].cpu[up.Name] - up0
			// The CPU times cover the warm-up too: count its requests, at the measured rate.
			x.ops += float64(figs[i].requests-n0) * float64(g.opt.Warmup+g.opt.Duration) / float64(g.opt.Duration)
		}
	}
	g.pg = append([]*figure{pgb}, figs...)
	return nil
}

type pgbenchRun struct {
	tps, latencyMS float64
	transactions   int64
	cpu            time.Duration // pgbench's own CPU time
}

// pgbenchScript writes the pgbench script of the new-key path: the same two statements
// pgstore runs (store/pgstore/queries.go; the same script as scripts/bench-pgbench.sh), the
// claim and the completion, each its own transaction, on a table made by the same migration.
func (g *gatewayRun) pgbenchScript(ctx context.Context, conn *pgx.Conn) (string, error) {
	const t = pgSchema + ".pgbench_records"
	if _, err := conn.Exec(ctx, "CREATE TABLE "+t+" (LIKE "+pgSchema+".idem_records INCLUDING ALL)"); err != nil {
		return "", fmt.Errorf("harness: pgbench table (from the gateway's migrated idem_records): %w", err)
	}
	resp := storekit.EncodeResponse(idem.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(targets.Body))}}, Body: targets.Body})
	respLit := `'\x` + fmt.Sprintf("%x", resp) + `'::bytea`
	const now = "(extract(epoch FROM clock_timestamp()) * 1e6)::bigint"
	const key = "(:r)::text"
	const cols = "fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at"
	reserve := `WITH up AS (INSERT INTO ` + t + ` AS r (key, ` + cols + `) ` +
		`VALUES (` + key + `, repeat('a', 64), 1, ` + now + `, ` + now + ` + 30000000, 1, NULL, ` + now + `, 0, ` + now + ` + 86400000000) ` +
		`ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, state = 1, token = GREATEST(r.token + 1, excluded.token), ` +
		`lease_until = excluded.lease_until, attempts = CASE WHEN r.expires_at <= excluded.created_at THEN 1 ELSE r.attempts + 1 END, ` +
		`response = NULL, created_at = CASE WHEN r.expires_at <= excluded.created_at THEN excluded.created_at ELSE r.created_at END, ` +
		`completed_at = 0, expires_at = excluded.expires_at ` +
		`WHERE r.expires_at <= excluded.created_at OR (r.state = 1 AND r.lease_until <= excluded.created_at AND r.fingerprint = excluded.fingerprint) ` +
		`RETURNING true AS claimed, ` + cols + `), ` +
		`cur AS (SELECT false AS claimed, ` + cols + ` FROM ` + t + ` WHERE key = ` + key + ` AND NOT EXISTS (SELECT 1 FROM up) FOR SHARE) ` +
		`SELECT * FROM up UNION ALL SELECT * FROM cur`
	complete := `UPDATE ` + t + ` SET state = 2, response = ` + respLit + `, completed_at = ` + now + `, expires_at = ` + now + ` + 86400000000 ` +
		`WHERE key = ` + key + ` AND token = :token AND state = 1 AND expires_at <> 0;`
	script := "\\set r random(1, 9000000000000000)\n" + reserve + " \\gset\n" + complete + "\n"
	path := g.dir + "/newkey.sql"
	return path, os.WriteFile(path, []byte(script), 0o644)
}

var (
	tpsRe = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	latRe = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	txRe  = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
)

func (g *gatewayRun) runPgbench(ctx context.Context, script string) (pgbenchRun, error) {
	secs := max(1, int((g.opt.Duration+g.opt.Warmup+time.Second/2)/time.Second))
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "pgbench", "-n", "-M", "prepared", "-c", strconv.Itoa(g.opt.PGConns), "-j", "2",
		"-T", strconv.Itoa(secs), "-f", script, g.opt.PostgresURL)
	outb, err := cmd.CombinedOutput()
	if err != nil {
		return pgbenchRun{}, fmt.Errorf("harness: pgbench: %w\n%s", err, outb)
	}
	var r pgbenchRun
	if ps := cmd.ProcessState; ps != nil {
		r.cpu = ps.UserTime() + ps.SystemTime()
	}
	m := tpsRe.FindSubmatch(outb)
	if m == nil {
		return r, fmt.Errorf("harness: pgbench printed no tps:\n%s", outb)
	}
	r.tps, _ = strconv.ParseFloat(string(m[1]), 64)
	if m := latRe.FindSubmatch(outb); m != nil {
		r.latencyMS, _ = strconv.ParseFloat(string(m[1]), 64)
	}
	if m := txRe.FindSubmatch(outb); m != nil {
		r.transactions, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	if bytes.Contains(outb, []byte("failed")) && !bytes.Contains(outb, []byte("number of failed transactions: 0")) {
		return r, fmt.Errorf("harness: pgbench transactions failed:\n%s", outb)
	}
	return r, nil
}

type inflightRun struct {
	n                    int // keys in flight measured
	asked                int // keys in flight asked for (more than n when n is what fits)
	gwIdle, gwPeak       int64
	bareIdle, barePeak   int64
	gwMaxUp, bareMaxUp   int64 // the most requests the upstream held at once
	gwResult, bareResult *load.Result
}

// memoryInFlight measures peak RSS (VmHWM) of the gateway, and of the bare hop, while n
// requests with distinct keys wait on a slow upstream at once.
func (g *gatewayRun) memoryInFlight(ctx context.Context) error {
	if len(g.opt.InFlight) == 0 {
		return nil
	}
	g.nofile = raiseNofile(slices.Max(g.opt.InFlight))
	fmt.Fprintf(g.progress, "gateway: %s\n", g.nofile)
	for _, asked := range g.opt.InFlight {
		fmt.Fprintf(g.progress, "gateway: peak memory with %d keys in flight (upstream delay %s)\n", asked, g.opt.InFlightDelay)
		r := inflightRun{asked: asked}
		var err error
		r.n, r.gwIdle, r.gwPeak, r.gwMaxUp, r.gwResult, err = g.burst(ctx, asked, true)
		if err != nil {
			return err
		}
		_, r.bareIdle, r.barePeak, r.bareMaxUp, r.bareResult, err = g.burst(ctx, r.n, false)
		if err != nil {
			return err
		}
		g.inflight = append(g.inflight, r)
	}
	return nil
}

// burst sends n requests with new keys at once through a new proxy (the gateway, or the bare
// hop) to a slow upstream, fewer if n do not fit under the limit on open files (measured is
// how many were sent).
func (g *gatewayRun) burst(ctx context.Context, n int, gateway bool) (measured int, idle, peak, maxUp int64, res *load.Result, err error) {
	up, err := g.upstream(ctx, "upstream-slow", g.opt.InFlightDelay)
	if err != nil {
		return
	}
	defer up.Stop()
	var px *Proc
	// The clients speak h2c to both proxies, so their requests share a few connections and
	// each in-flight request holds one socket in the proxy (its upstream connection).
	if gateway {
		px, err = g.gateway(ctx, "gateway-inflight", up, "memory://", "--h2c")
	} else {
		px, err = g.bareProxy(ctx, "bareproxy-inflight", up, "--h2c")
	}
	if err != nil {
		return
	}
	defer px.Stop()
	m, err := px.Mem()
	if err != nil {
		return
	}
	idle = m.RSS
	fds, err := openFDs(px.Pid())
	if err != nil {
		return
	}
	if measured = g.nofile.fits(n, fds); measured < n {
		fmt.Fprintf(g.progress, "  %d requests do not fit under the limit on open files (%d open at idle, %d per request): %d instead\n", n, fds, fdsPerRequest, measured)
		n = measured
	}
	res, err = load.Run(ctx, load.Options{URL: px.URL("/v1/charges"), Mode: load.NewKey, Clients: n, Requests: int64(n),
		Duration: g.opt.InFlightDelay + 60*time.Second, Timeout: g.opt.InFlightDelay + 50*time.Second, H2C: true})
	if err != nil {
		return
	}
	if m, err = px.Mem(); err != nil {
		return
	}
	peak = m.PeakRSS
	var st targets.Stats
	if st, err = upstreamStats(ctx, up); err != nil {
		return
	}
	maxUp = st.MaxInFlight
	name := "bare hop"
	if gateway {
		name = "gateway "
	}
	fmt.Fprintf(g.progress, "  %s: idle RSS %s, peak RSS %s, upstream held %d at once; %s\n", name, mib(idle), mib(peak), maxUp, res)
	return
}

func upstreamStats(ctx context.Context, up *Proc) (targets.Stats, error) {
	var st targets.Stats
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.URL(targets.StatsPath), nil)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// withParams returns raw with the query parameters set.
func withParams(raw string, params map[string]string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w: PostgresURL is not a URL", ErrConfig)
	}
	q := u.Query()
	for k, v := range params {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func firstLine(s string) string {
	sc := bufio.NewScanner(strings.NewReader(strings.TrimSpace(s)))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			return l
		}
	}
	return ""
}
