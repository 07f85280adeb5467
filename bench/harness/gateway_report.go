package harness

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idemkit/idem/store/storeurl"
)

// Bars of issue 6, as ratios to the baseline.
const (
	barPassThrough = 0.95 // gateway without a key / bare hop
	barNewKey      = 0.70 // gateway, new key, memory store / bare hop
	barReplay      = 1.50 // gateway replays / bare hop
	barPostgres    = 0.60 // gateway, new key, PostgreSQL / pgbench
)

func (g *gatewayRun) report(out io.Writer) error {
	var b strings.Builder
	o := g.opt
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# Gateway: `idem serve` against a bare reverse proxy\n\n")
	p("Measured %s UTC, in %s. Machine: %s.\n\n", g.started.UTC().Format("2006-01-02 15:04"), time.Since(g.started).Round(time.Second), g.machine)
	p("Command: `%s`\n\n", o.Command)
	p("Setup, all on loopback: an upstream (Go net/http, answers 201 with an 86-byte JSON body, GOMAXPROCS=%d); "+
		"the baseline, a bare `httputil.ReverseProxy` tuned as a Go proxy should be (1024 idle upstream connections per host, "+
		"a 32 KiB buffer pool; GOMAXPROCS=%d); the gateway, the `idem serve` binary with default flags and its text log to a file "+
		"(GOMAXPROCS=%d); the in-repo load generator (`bench/load`, GOMAXPROCS=%d, %d keep-alive clients, each POSTing a "+
		"53-byte JSON body one request after another). Each case runs %s after a %s warm-up, %d rounds interleaved "+
		"(bare, pass-through, bare, new key, bare, replay, then again), each run on a proxy process started for it "+
		"(so no case pays the garbage collection of records another case left in the memory store; a new-key run pays for its own); "+
		"a gateway case's ratio is the median over rounds of its rate over the rate of the bare run just before it "+
		"(the bare hop's row is over all its runs), latencies are over all rounds. The machine's 2 cores are shared by the load generator, the proxy, the "+
		"upstream and other work, so absolute rates are low and noisy: read the ratios.\n\n",
		o.UpstreamProcs, o.ProxyProcs, o.ProxyProcs, loadProcs(), o.Clients, o.Duration, o.Warmup, o.Rounds)

	if len(g.mem) == 4 {
		bare := g.mem[0]
		p("| case | req/s (median) | vs bare hop | target | p50 | p99 | proxy CPU/req | upstream CPU/req | errors |\n")
		p("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
		bars := []struct {
			bar  float64
			name string
		}{{0, ""}, {barPassThrough, "≥ 0.95"}, {barNewKey, "≥ 0.70"}, {barReplay, "≥ 1.50"}}
		procs := []string{"bareproxy", "gateway-memory", "gateway-memory", "gateway-memory"}
		for i, f := range g.mem {
			r := ratio(f, bare)
			if i < len(g.memPairs) && g.memPairs[i] != nil {
				r = ratio(f, g.memPairs[i])
			}
			barCol := "baseline"
			if i > 0 {
				barCol = bars[i].name + " " + verdict(r >= bars[i].bar)
			}
			p("| %s | %.0f | %.2f | %s | %s | %s | %.0f µs | %.0f µs | %d |\n", f.name, f.rate(), r, barCol,
				us(f.lat.Quantile(0.5)), us(f.lat.Quantile(0.99)), f.cpuPerReq(procs[i]), f.cpuPerReq("upstream"), f.errors)
		}
		p("\nRates per round (req/s):")
		for _, f := range g.mem {
			p(" %s: %s;", f.name, rates(f.rates))
		}
		p(" replayed answers in the replay case: %d of %d.\n\n", g.mem[3].replayed, g.mem[3].requests)
		for _, f := range g.mem {
			if f.firstErr != "" {
				p("First error in %s: `%s` (statuses %v).\n\n", f.name, f.firstErr, f.status)
			}
		}
	}

	if len(g.pg) == 4 {
		pgb, nk, rp, nk0 := g.pg[0], g.pg[1], g.pg[2], g.pg[3]
		p("## PostgreSQL\n\n")
		p("The gateway on pgstore (%s; pool of %d connections, %d HTTP clients) against `pgbench -M prepared -c %d -j 2` "+
			"running the same two statements as the gateway's new-key path (the claim `INSERT … ON CONFLICT … DO UPDATE … RETURNING` "+
			"and the completion `UPDATE … WHERE token = …`, each its own durable transaction, the script of "+
			"`scripts/bench-pgbench.sh`) on a table of the same schema, rounds interleaved. synchronous_commit is the server's "+
			"(on: every commit waits for the WAL flush).\n\n", g.pgHost, o.PGConns, 2*o.PGConns, o.PGConns)
		p("By default (`postgres://` store URLs without `group_commit`) the gateway's store groups the claims and completions "+
			"that arrive together into shared transactions, %d at once (pgstore's Options.GroupCommit): the same statements, "+
			"sent together and committed together, each call answered only after its transaction committed. The row with "+
			"`group_commit=0` is a second gateway process, the same in every other way, that runs each claim and each completion "+
			"as its own statement and transaction, as pgbench does.\n\n", storeurl.PostgresGroupCommit)
		if g.pgNote != "" {
			p("`idem serve --store postgres://…` did not start (`%s`): the gateway package itself served it, "+
				"on `pgstore`, from `idembench serve-pggateway` (same handler, same default configuration, text log to a file).\n\n", g.pgNote)
		}
		p("| case | rate (median) | vs pgbench | target | p50 | p99 | errors |\n| --- | ---: | ---: | --- | ---: | ---: | ---: |\n")
		var lat []string
		for _, r := range g.pgbench {
			lat = append(lat, fmt.Sprintf("%.2f ms", r.latencyMS))
		}
		p("| %s | %.0f TPS | 1.00 | baseline | average %s | | 0 |\n", pgb.name, pgb.rate(), strings.Join(lat, ", "))
		r := ratio(nk, pgb)
		p("| %s | %.0f req/s | %.2f | ≥ 0.60 %s | %s | %s | %d |\n", nk.name, nk.rate(), r, verdict(r >= barPostgres), us(nk.lat.Quantile(0.5)), us(nk.lat.Quantile(0.99)), nk.errors)
		p("| %s | %.0f req/s | %.2f | (none) | %s | %s | %d |\n", nk0.name, nk0.rate(), ratio(nk0, pgb), us(nk0.lat.Quantile(0.5)), us(nk0.lat.Quantile(0.99)), nk0.errors)
		p("| %s | %.0f req/s | %.2f | (none) | %s | %s | %d |\n", rp.name, rp.rate(), ratio(rp, pgb), us(rp.lat.Quantile(0.5)), us(rp.lat.Quantile(0.99)), rp.errors)
		p("\nRates per round: pgbench %s TPS; gateway new key %s req/s; new key with group_commit=0 %s req/s; replay %s req/s.\n\n",
			rates(pgb.rates), rates(nk.rates), rates(nk0.rates), rates(rp.rates))
		if len(g.pgCPU) == 4 {
			g.reportPGCPU(p)
		}
		for _, f := range []*figure{nk, nk0, rp} {
			if f.firstErr != "" {
				p("First error in %s: `%s` (statuses %v).\n\n", f.name, f.firstErr, f.status)
			}
		}
	}

	if len(g.inflight) > 0 {
		p("## Memory with many keys in flight\n\n")
		p("A slow upstream holds every request %s; N clients each send one request with its own new key, all at once, "+
			"so N claims are in flight together (memory store). Peak RSS is VmHWM from /proc/PID/status after the burst; idle RSS "+
			"is VmRSS before it. The same burst through the bare hop is the baseline. The clients speak HTTP/2 without TLS "+
			"(h2c, `idem serve --h2c`; the bare hop accepts it too), so their requests share connections, up to %d at once on "+
			"each; each proxied request holds one socket in the proxy, its upstream connection (HTTP/1.1 carries one request at "+
			"a time). Over HTTP/1.1 from the clients it would be two, and 10,000 keys in flight would need more descriptors than "+
			"this container allows one process. The harness raised the limit on open files its proxies inherit as far as it "+
			"could: %s.\n\n", o.InFlightDelay, streamsPerConn, g.nofile)
		for _, r := range g.inflight {
			if r.n < r.asked {
				p("**%d keys in flight could not be measured here**: %d requests need %d sockets in one proxy, more than the limit "+
					"leaves beside the proxy's own descriptors, so the burst was %d, the most that fits. The table shows the memory per "+
					"in-flight key is flat as N grows; no figure is extrapolated.\n\n", r.asked, r.asked, fdsFor(r.asked), r.n)
			}
		}
		p("| keys in flight (N) | upstream held at once | gateway idle → peak RSS | gateway per in-flight key | bare hop idle → peak RSS | bare hop per request | errors (gateway, bare) |\n")
		p("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, r := range g.inflight {
			per := func(idle, peak int64) string {
				return fmt.Sprintf("%.1f KiB", float64(peak-idle)/1024/float64(r.n))
			}
			p("| %d | %d, %d | %s → %s | %s | %s → %s | %s | %d, %d |\n", r.n, r.gwMaxUp, r.bareMaxUp,
				mib(r.gwIdle), mib(r.gwPeak), per(r.gwIdle, r.gwPeak), mib(r.bareIdle), mib(r.barePeak), per(r.bareIdle, r.barePeak),
				r.gwResult.Errors, r.bareResult.Errors)
		}
		p("\n")
		for _, r := range g.inflight {
			if r.gwResult.FirstError != "" || r.bareResult.FirstError != "" {
				p("N = %d: first errors: gateway `%s`, bare `%s`.\n\n", r.n, r.gwResult.FirstError, r.bareResult.FirstError)
			}
		}
	}
	_, err := io.WriteString(out, b.String())
	return err
}

func rates(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(s, ", ")
}

// reportPGCPU writes where the CPU goes per new key in the PostgreSQL cases: on a machine
// whose cores the load generator, the gateway, the upstream and PostgreSQL share, it bounds
// the ratio to pgbench.
func (g *gatewayRun) reportPGCPU(p func(string, ...any)) {
	pb, nk, rp, nk0 := &g.pgCPU[0], &g.pgCPU[1], &g.pgCPU[2], &g.pgCPU[3]
	server := func(c *pgCPU) string {
		if !g.pgCPUSeen {
			return "not visible"
		}
		return c.per(c.server)
	}
	p("CPU time per operation (a new key, or one pgbench run of the two statements; warm-ups included in both the time " +
		"and the count), summed over the processes of each part. PostgreSQL's is every `postgres` process's, exited " +
		"backends included: the whole server, so other clients' work on a shared server counts too, and a backend that exits " +
		"between two readings may be missed (a near-zero or negative figure); read it as indicative. The client is pgbench, " +
		"or the in-repo load generator.\n\n")
	p("| case | PostgreSQL | client | gateway | upstream | total |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, row := range []struct {
		name string
		c    *pgCPU
	}{{"pgbench, the same two statements", pb}, {"gateway, new key, PostgreSQL", nk},
		{"gateway, new key, PostgreSQL, group_commit=0", nk0}, {"gateway, replay, PostgreSQL", rp}} {
		total := "?"
		if g.pgCPUSeen {
			total = row.c.per(row.c.total())
		}
		gw, up := row.c.per(row.c.gateway), row.c.per(row.c.up)
		if row.c == pb {
			gw, up = "", ""
		}
		p("| %s | %s | %s | %s | %s | %s |\n", row.name, server(row.c), row.c.per(row.c.client), gw, up, total)
	}
	if g.pgCPUSeen && pb.ops > 0 && nk.ops > 0 && nk.total() > 0 {
		bound := (float64(pb.total()) / pb.ops) / (float64(nk.total()) / nk.ops)
		p("\nWhen the cores are the limit, the rate goes as the inverse of the CPU per operation: with these figures the gateway's "+
			"new-key rate can reach about %.2f of pgbench's (pgbench's total over the gateway path's total), whatever the "+
			"gateway's latency.\n\n", bound)
	} else {
		p("\n")
	}
}
