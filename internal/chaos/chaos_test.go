//go:build chaos

package chaos_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/chaos"
	"github.com/idemkit/idem/internal/testenv"
)

// binaryPath is the gateway command, built once: the real idem CLI.
var binaryPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-chaos-bin-")
	if err != nil {
		panic(err)
	}
	binaryPath = filepath.Join(dir, "idem")
	if err := build(binaryPath, "github.com/idemkit/idem/cmd/idem"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// build compiles the command pkg to out (with the race detector if IDEM_CHAOS_RACE=1).
func build(out, pkg string) error {
	args := []string{"build", "-o", out}
	if os.Getenv("IDEM_CHAOS_RACE") == "1" {
		args = append(args, "-race")
	}
	if b, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// allFaults are the fault classes; IDEM_CHAOS_FAULTS (a comma list) narrows a run to some.
var allFaults = []string{"kill", "pause", "store", "net", "upstream", "client", "release", "fence", "deploy"}

// newConfig reads the run's settings from the environment, for a store kind.
func newConfig(storeKind string) config {
	cfg := config{
		ops:         envInt("IDEM_CHAOS_OPS", 5000),
		gateways:    envInt("IDEM_CHAOS_GATEWAYS", 3),
		concurrency: envInt("IDEM_CHAOS_CONCURRENCY", 48),
		storeKind:   storeKind,
		seed:        uint64(envInt("IDEM_CHAOS_SEED", int(time.Now().UnixNano()%1e9))),
		lease:       2 * time.Second,
		faults:      map[string]bool{},
		pauseGap:    [2]time.Duration{2 * time.Second, 5 * time.Second},
		tenants:     envInt("IDEM_CHAOS_TENANTS", 3),
		fenceMin:    3,
		fenceGap:    [2]time.Duration{time.Second, 3 * time.Second},
	}
	names := allFaults
	if v := os.Getenv("IDEM_CHAOS_FAULTS"); v != "" {
		names = strings.Split(v, ",")
	}
	for _, f := range names {
		cfg.faults[strings.TrimSpace(f)] = true
	}
	return cfg
}

// storeKinds lists the stores to run on: IDEM_CHAOS_STORES (a comma list of postgres, redis,
// sqlite), else IDEM_CHAOS_STORE, else PostgreSQL and Redis.
func storeKinds() []string {
	v := cmp.Or(os.Getenv("IDEM_CHAOS_STORES"), os.Getenv("IDEM_CHAOS_STORE"), "postgres,redis")
	return strings.Split(v, ",")
}

// TestChaos runs the load under every fault class on each store, and requires the verdict to
// be all zeros.
func TestChaos(t *testing.T) {
	for _, kind := range storeKinds() {
		t.Run(kind, func(t *testing.T) {
			cfg := newConfig(kind)
			v := runChaos(t, cfg, binaryPath, "")
			if !v.OK() {
				t.Errorf("the chaos verdict is not all zeros (rerun with IDEM_CHAOS_KEEP=1 to keep the effect table; IDEM_CHAOS_FAULTS narrows the fault classes)")
			}
			if v.Ops < cfg.ops || v.Probes < cfg.ops {
				t.Errorf("judged %d operations and %d probes, want %d at least", v.Ops, v.Probes, cfg.ops)
			}
		})
	}
}

// TestChaosPlantedBugsFail runs the gateways on real stores with one guarantee removed (the
// planted command: the store's Complete unfenced, its Extend unfenced, both, its keys without
// their scope, or its leases never extended past one lease from now, which removes a draining
// gateway's floor), under the faults aimed at that guarantee, and requires the verdict to fail
// where the bug lives, on every store.
func TestChaosPlantedBugsFail(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "planted")
	if err := build(bin, "github.com/idemkit/idem/internal/chaos/planted"); err != nil {
		t.Fatal(err)
	}
	doubled := func(plan string) func(chaos.Verdict) bool {
		return func(v chaos.Verdict) bool {
			return slices.ContainsFunc(v.DoubledOps, func(op string) bool { return planOf(op) == plan })
		}
	}
	bugs := []struct {
		prefix string
		faults []string
		// caught reports whether the verdict failed where this bug lives.
		caught func(chaos.Verdict) bool
	}{
		{"nofence-complete", []string{"fence"}, doubled(planFenceComplete)},
		{"nofence-extend", []string{"fence"}, doubled(planFenceExtend)},
		{"nofence", []string{"fence"}, func(v chaos.Verdict) bool {
			return doubled(planFenceComplete)(v) || doubled(planFenceExtend)(v)
		}},
		{"noscope", nil, func(v chaos.Verdict) bool { return v.CrossTenant > 0 }},
		{"nodrain", []string{"deploy"}, func(v chaos.Verdict) bool { return v.DrainedDoubles > 0 && doubled(planDrain)(v) }},
	}
	for _, kind := range storeKinds() {
		if kind == "sqlite" {
			continue // the planted stores wrap the network stores
		}
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var store storeServer
			if kind == "postgres" {
				store = startPrivatePG(t)
			} else {
				store = startPrivateRedis(t)
			}
			for _, bug := range bugs {
				t.Run(bug.prefix, func(t *testing.T) {
					cfg := newConfig(kind)
					cfg.store = store
					cfg.ops = envInt("IDEM_CHAOS_PLANTED_OPS", 60)
					cfg.faults = map[string]bool{}
					for _, f := range bug.faults {
						cfg.faults[f] = true
					}
					cfg.fenceMin = envInt("IDEM_CHAOS_PLANTED_FENCES", 6)
					cfg.fenceGap = [2]time.Duration{}
					v := runChaos(t, cfg, bin, bug.prefix+"+")
					if v.OK() || !bug.caught(v) {
						t.Errorf("the planted store %s+%s was not caught where its bug lives (verdict OK: %v)", bug.prefix, kind, v.OK())
					}
				})
			}
		})
	}
}

// runChaos runs one chaos run: cfg.ops operations through cfg.gateways gateways (the command
// binary) sharing a private store of cfg.storeKind (its URL prefixed by storePrefix), under
// the faults of cfg; then one probe per operation with no fault. It logs the verdict and the
// fault mix, and returns the verdict.
func runChaos(t *testing.T, cfg config, binary, storePrefix string) chaos.Verdict {
	pgURL := testenv.PostgresURL(t)
	run := fmt.Sprintf("r%d", time.Now().UnixNano()%1e12)
	t.Logf("chaos run %s: %d operations, %d gateways on a %s store, %d in flight, seed %d, faults %v",
		run, cfg.ops, cfg.gateways, cfg.storeKind, cfg.concurrency, cfg.seed, slices.Sorted(maps.Keys(cfg.faults)))

	dir := t.TempDir()
	if os.Getenv("IDEM_CHAOS_KEEP") != "" {
		// The gateways' logs outlive the test, for reading an unexplained re-execution.
		dir = filepath.Join(os.TempDir(), "idem-chaos-"+run)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Logf("gateway logs kept in %s", dir)
	}
	h := &harness{t: t, cfg: cfg, binary: binary, run: run, dir: dir, lease: cfg.lease,
		rng: rand.New(rand.NewPCG(cfg.seed, 2)), inFlight: map[string]bool{}, releaseOutcomes: map[string]int{}}
	for range (cfg.ops + cfg.tenants - 1) / cfg.tenants {
		h.plans = append(h.plans, h.choosePlan())
	}
	switch {
	case cfg.store != nil:
		h.store = cfg.store
	case cfg.storeKind == "postgres":
		h.store = startPrivatePG(t)
	case cfg.storeKind == "redis":
		h.store = startPrivateRedis(t)
	case cfg.storeKind == "sqlite":
		h.store = sqliteFile{path: filepath.Join(h.dir, "idem.db")}
	default:
		t.Fatalf("store %q: want postgres, redis or sqlite", cfg.storeKind)
	}
	h.storeURL = storePrefix + h.store.URL()
	h.up = startUpstream(t, pgURL, run, cfg.seed, cfg.lease, upstreamTimeout, h.onLost)
	h.up.onFence = h.fenceExecuted
	ctx := context.Background()
	h.startSlots(ctx)

	loadTime := h.load(ctx)
	h.calm(ctx)
	h.probe(ctx)

	logs := h.gatewayLogs()
	v := chaos.Judge(chaos.History{Effects: h.up.effects(t), Answers: h.answers, Kills: h.kills, Pauses: h.pauses,
		Outages: h.outages, LostAnswers: h.lost, Releases: h.releases, Stalls: h.stalls, HolderStalls: logs.stalls,
		Unstored: logs.unstored, Deploys: h.deploys,
		Lease: cfg.lease, UpstreamTimeout: upstreamTimeout})
	var b strings.Builder
	v.Report(&b)
	h.faultMix(&b, loadTime)
	h.doubledByPlan(&b, v)
	fmt.Print("\n", b.String())
	t.Log("\n" + b.String())
	return v
}

// load sends every operation under faults, and returns how long it took.
func (h *harness) load(ctx context.Context) time.Duration {
	tr := &http.Transport{MaxIdleConnsPerHost: 256, ResponseHeaderTimeout: 20 * time.Second}
	defer tr.CloseIdleConnections()
	client, err := idemclient.NewClient(idemclient.Options{
		Base:        rotating{h: h, base: tr, via: func(s *slot) string { return s.front.Addr() }, impatient: true},
		MaxAttempts: 12, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second, MaxElapsed: 30 * time.Second,
		OnEvent: h.clientEvent,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	start := time.Now()
	h.setFaults(true)
	faultCtx, stopFaults := context.WithCancel(ctx)
	var faults sync.WaitGroup
	for name, fns := range map[string][]func(context.Context, *sync.WaitGroup){
		"kill": {h.killer}, "pause": {h.pauser}, "release": {h.operator}, "deploy": {h.deployer, h.drainAims},
		"fence": {h.fenceCompletions, h.fenceExtensions},
	} {
		for _, fn := range fns {
			if h.cfg.faults[name] {
				faults.Add(1)
				go fn(faultCtx, &faults)
			}
		}
	}
	if h.cfg.faults["store"] && h.cfg.store == nil {
		faults.Add(1)
		go h.storeCrasher(faultCtx, &faults)
	}
	faults.Add(1)
	go h.stallProbe(faultCtx, &faults)

	opc := make(chan int)
	var workers sync.WaitGroup
	for range h.cfg.concurrency {
		workers.Go(func() {
			for i := range opc {
				h.operation(ctx, client, i)
			}
		})
	}
	progress := time.NewTicker(15 * time.Second)
	for i := range h.cfg.ops {
		select {
		case <-progress.C:
			h.t.Logf("%s: %d/%d operations sent", time.Since(start).Round(time.Second), i, h.cfg.ops)
		default:
		}
		opc <- i
	}
	progress.Stop()
	close(opc)
	workers.Wait()
	loadTime := time.Since(start)
	stopFaults()
	faults.Wait()
	return loadTime
}

func (h *harness) clientEvent(ev idemclient.Event) {
	switch ev.Kind {
	case idemclient.EventAttempt:
		h.clientStats.attempts.Add(1)
		switch ev.Status {
		case http.StatusConflict:
			h.clientStats.conflicts.Add(1)
		case http.StatusServiceUnavailable:
			h.clientStats.unavailable.Add(1)
		}
	case idemclient.EventRetry:
		h.clientStats.retries.Add(1)
	case idemclient.EventGiveUp:
		h.clientStats.giveUps.Add(1)
	}
}

// calm turns every fault off, brings every gateway back, and waits until every lease has
// expired.
func (h *harness) calm(ctx context.Context) {
	h.setFaults(false)
	h.up.calm.Store(true)
	for _, s := range h.slots {
		if !s.up.Load() {
			if err := s.start(ctx); err != nil {
				h.t.Fatal(err)
			}
		}
	}
	time.Sleep(h.lease + time.Second)
	for _, s := range h.slots {
		if err := s.ready(ctx); err != nil {
			h.t.Fatalf("gateway %s not ready for the probes: %v", s.name, err)
		}
	}
}

// probe sends each operation once more, with no fault: it must succeed.
func (h *harness) probe(ctx context.Context) {
	probeTr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer probeTr.CloseIdleConnections()
	probe := &http.Client{Transport: rotating{h: h, base: probeTr, via: func(s *slot) string { return fmt.Sprintf("127.0.0.1:%d", s.port) }}, Timeout: 20 * time.Second}
	opc := make(chan string)
	var workers sync.WaitGroup
	for range 16 {
		workers.Go(func() {
			for op := range opc {
				_, base := splitOp(op)
				// Only a network error is tried again (nothing is injected now, so it is rare).
				var a chaos.Answer
				for attempt := 0; attempt < 4; attempt++ {
					if a = h.deliver(ctx, probe, op, h.run+"-"+base, h.payload(op, 0), func(a *chaos.Answer) { a.Probe = true }); a.Status != 0 {
						break
					}
				}
				h.record(a)
			}
		})
	}
	for i := range h.cfg.ops {
		opc <- h.opName(i)
	}
	for _, op := range h.fenceOps {
		opc <- op
	}
	close(opc)
	workers.Wait()
}

// operation sends one operation: one to three deliveries with the same key, some at once, some
// a little later; and sometimes, once it succeeded, the same key with another payload. Its plan
// may add a client that goes away mid-request or mid-answer.
func (h *harness) operation(ctx context.Context, client *http.Client, i int) {
	op := h.opName(i)
	tenant, base := splitOp(op)
	key := h.run + "-" + base
	body := h.payload(op, 0)
	h.mu.Lock()
	h.inFlight[op] = true
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.inFlight, op)
		h.mu.Unlock()
	}()
	plan := planOf(op)
	if plan == planHalfReq {
		h.halfRequest(tenant, base, key, body)
	}
	n := 1
	if h.roll() < 0.6 {
		n++
	}
	if h.roll() < 0.25 {
		n++
	}
	var wg sync.WaitGroup
	var succeeded atomic.Bool
	if plan == planBig || plan == planHangUp {
		wg.Go(func() { h.hangUp(tenant, base, key, body, 4096) })
	}
	for range n {
		pause := h.between(0, 80*time.Millisecond)
		wg.Go(func() {
			time.Sleep(pause)
			a := h.deliver(ctx, client, op, key, body, nil)
			h.record(a)
			if a.Status >= 200 && a.Status < 300 {
				succeeded.Store(true)
			}
		})
	}
	wg.Wait()
	if succeeded.Load() && h.roll() < 0.03 {
		h.record(h.deliver(ctx, client, op, key, h.payload(op, 1_000_000), func(a *chaos.Answer) { a.Mismatch = true }))
	}
	if succeeded.Load() {
		h.mu.Lock()
		h.succeededOps = append(h.succeededOps, op)
		h.mu.Unlock()
	}
}

func clipLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " / ")
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// doubledByPlan writes how many operations with an unexplained re-execution had each plan
// (or were released by the operator while in progress).
func (h *harness) doubledByPlan(b *strings.Builder, v chaos.Verdict) {
	if len(v.DoubledOps) == 0 {
		return
	}
	released := map[string]bool{}
	for _, r := range h.releases {
		if r.Done && !r.Force {
			released[r.Op] = true
		}
	}
	by := map[string]int{}
	for _, op := range v.DoubledOps {
		switch {
		case released[op]:
			by["released in progress by the operator"]++
		default:
			by[cmp.Or(planOf(op), "none")]++
		}
	}
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%s %d", p, by[p]))
	}
	fmt.Fprintf(b, "operations doubled without excuse, by plan: %s\n", strings.Join(parts, ", "))
}

// faultMix writes what was injected and how the gateways saw the run.
func (h *harness) faultMix(b *strings.Builder, load time.Duration) {
	var front, back struct{ conns, ex, dreq, dresp, delay int64 }
	starts := 0
	for _, s := range h.slots {
		f, k := s.front.Stats(), s.back.Stats()
		front.ex += f.Exchanges
		front.dreq += f.DroppedRequests
		front.dresp += f.DroppedResponses
		front.delay += f.Delays
		back.ex += k.Exchanges
		back.dreq += k.DroppedRequests
		back.dresp += k.DroppedResponses
		back.delay += k.Delays
		starts += s.starts
	}
	logs := h.gatewayLogs()
	names := make([]string, 0, len(logs.outcomes))
	for k := range logs.outcomes {
		names = append(names, k)
	}
	sort.Strings(names)
	var oc []string
	for _, k := range names {
		oc = append(oc, fmt.Sprintf("%s %d", k, logs.outcomes[k]))
	}
	fmt.Fprintf(b, "fault mix (load phase %s, %d gateways, %s store):\n", load.Round(time.Millisecond), len(h.slots), h.cfg.storeKind)
	fmt.Fprintf(b, "  gateway kill -9: %d (gateway processes started: %d)\n", len(h.kills), starts)
	fmt.Fprintf(b, "  store server crashes and restarts: %d (down %s in all)\n", h.storeCrash, h.storeDown.Round(time.Millisecond))
	fmt.Fprintf(b, "  client→gateway proxy: %d exchanges, %d requests dropped, %d answers dropped, %d delayed\n", front.ex, front.dreq, front.dresp, front.delay)
	fmt.Fprintf(b, "  gateway→upstream proxy: %d exchanges, %d requests dropped, %d answers dropped after the upstream acted, %d delayed\n", back.ex, back.dreq, back.dresp, back.delay)
	fmt.Fprintf(b, "  upstream 503 before acting: %d; upstream inserts failed: %d\n", h.up.refused.Load(), h.up.failed.Load())
	fmt.Fprintf(b, "  client attempts %d, retries %d, gave up %d; answers 409 in flight %d, 503 %d\n",
		h.clientStats.attempts.Load(), h.clientStats.retries.Load(), h.clientStats.giveUps.Load(), h.clientStats.conflicts.Load(), h.clientStats.unavailable.Load())
	fmt.Fprintf(b, "  gateway outcomes (from their logs): %s; takeovers %d\n", strings.Join(oc, ", "), logs.takeovers)
	fmt.Fprintf(b, "  executions answered but not stored: %d, of which completions refused with ErrLeaseLost (fencing) %d\n", len(logs.unstored)/max(1, h.cfg.tenants), logs.fenced)
	var longestHeld time.Duration
	for _, st := range logs.stalls {
		longestHeld = max(longestHeld, st.Stalled)
	}
	fmt.Fprintf(b, "  gateways stalled past a lease they held (their own log): %d, longest %s\n", len(logs.stalls)/max(1, h.cfg.tenants), longestHeld.Round(time.Millisecond))
	var paused time.Duration
	for _, p := range h.pauses {
		paused += p.To.Sub(p.From)
	}
	fmt.Fprintf(b, "  gateway SIGSTOP past the lease, then SIGCONT: %d (%s in all)\n", len(h.pauses), paused.Round(time.Millisecond))
	fmt.Fprintf(b, "  tenants %d (same keys, scope header and secret); fencing operations %d; store links held back past the lease %d\n",
		h.cfg.tenants, len(h.fenceOps), h.cuts)
	fmt.Fprintf(b, "  rolling-deploy restarts (SIGTERM, drain, exit, start): %d\n", len(h.deploys))
	var longest time.Duration
	half := 0
	for _, st := range h.stalls {
		longest = max(longest, st.Late)
		if st.Late >= h.lease/2 {
			half++
		}
	}
	fmt.Fprintf(b, "  machine stalls (the harness's 20ms sleep woke %s late or more): %d, %d of them half a lease or more, longest %s\n",
		stallLate, len(h.stalls), half, longest.Round(time.Millisecond))
	var plans []string
	for _, m := range planMix {
		n := 0
		for _, p := range h.plans {
			if p == m.plan {
				n++
			}
		}
		injected := int64(0)
		if c, ok := h.up.injected.Load(m.plan); ok {
			injected = c.(*atomic.Int64).Load()
		}
		plans = append(plans, fmt.Sprintf("%s %d (upstream applied %d)", m.plan, n, injected))
	}
	fmt.Fprintf(b, "  operation plans: %s\n", strings.Join(plans, ", "))
	fmt.Fprintf(b, "  clients gone mid-request %d, mid-answer %d\n", h.clientFaults.halfRequests.Load(), h.clientFaults.hangUps.Load())
	var rel []string
	for _, k := range slices.Sorted(maps.Keys(h.releaseOutcomes)) {
		rel = append(rel, fmt.Sprintf("%s %d", k, h.releaseOutcomes[k]))
	}
	fmt.Fprintf(b, "  operator `idem release`: %d [%s]\n", len(h.releases), strings.Join(rel, ", "))
	for _, f := range h.releaseFailures {
		fmt.Fprintf(b, "    failed: %s\n", clipLine(f))
	}
}

// stallLate is how late a wake-up of the stall probe must be to count as a stall.
const stallLate = 200 * time.Millisecond

// stallProbe sleeps 20ms again and again and records each wake-up that came stallLate or more
// late: times the machine starved the harness, and likely the gateways with it.
func (h *harness) stallProbe(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	const nap = 20 * time.Millisecond
	for ctx.Err() == nil {
		t := time.Now()
		time.Sleep(nap)
		if late := time.Since(t) - nap; late >= stallLate {
			h.mu.Lock()
			h.stalls = append(h.stalls, chaos.Stall{At: time.Now(), Late: late})
			h.mu.Unlock()
		}
	}
}
