//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
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
	args := []string{"build", "-o", binaryPath}
	if os.Getenv("IDEM_CHAOS_RACE") == "1" {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, "github.com/idemkit/idem/cmd/idem")...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the gateway: %v\n%s", err, out)
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

func TestChaos(t *testing.T) {
	cfg := config{
		ops:         envInt("IDEM_CHAOS_OPS", 5000),
		gateways:    envInt("IDEM_CHAOS_GATEWAYS", 3),
		concurrency: envInt("IDEM_CHAOS_CONCURRENCY", 48),
		storeKind:   os.Getenv("IDEM_CHAOS_STORE"),
		seed:        uint64(envInt("IDEM_CHAOS_SEED", int(time.Now().UnixNano()%1e9))),
		lease:       2 * time.Second,
	}
	if cfg.storeKind == "" {
		cfg.storeKind = "postgres"
	}
	pgURL := testenv.PostgresURL(t)
	run := fmt.Sprintf("r%d", time.Now().UnixNano()%1e12)
	t.Logf("chaos run %s: %d operations, %d gateways on a %s store, %d in flight, seed %d",
		run, cfg.ops, cfg.gateways, cfg.storeKind, cfg.concurrency, cfg.seed)

	h := &harness{t: t, cfg: cfg, binary: binaryPath, dir: t.TempDir(), lease: cfg.lease,
		rng: rand.New(rand.NewPCG(cfg.seed, 2))}
	switch cfg.storeKind {
	case "postgres":
		h.store = startPrivatePG(t)
	case "redis":
		h.store = startPrivateRedis(t)
	case "sqlite":
		h.store = sqliteFile{path: filepath.Join(h.dir, "idem.db")}
	default:
		t.Fatalf("IDEM_CHAOS_STORE=%q: want postgres, redis or sqlite", cfg.storeKind)
	}
	h.up = startUpstream(t, pgURL, run, cfg.seed)
	ctx := context.Background()
	h.startSlots(ctx)

	tr := &http.Transport{MaxIdleConnsPerHost: 256, ResponseHeaderTimeout: 20 * time.Second}
	defer tr.CloseIdleConnections()
	client, err := idemclient.NewClient(idemclient.Options{
		Base:        rotating{h: h, base: tr, via: func(s *slot) string { return s.front.Addr() }},
		MaxAttempts: 12, BaseDelay: 20 * time.Millisecond, MaxDelay: time.Second, MaxElapsed: 30 * time.Second,
		OnEvent: func(ev idemclient.Event) {
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
		},
	})
	if err != nil {
		t.Fatal(err)
	}

	// Load, under faults.
	start := time.Now()
	h.setFaults(true)
	faultCtx, stopFaults := context.WithCancel(ctx)
	var faults sync.WaitGroup
	faults.Add(2)
	go h.killer(faultCtx, &faults)
	go h.storeCrasher(faultCtx, &faults)

	opc := make(chan int)
	var workers sync.WaitGroup
	for range cfg.concurrency {
		workers.Go(func() {
			for i := range opc {
				h.operation(ctx, client, run, i)
			}
		})
	}
	progress := time.NewTicker(15 * time.Second)
	for i := range cfg.ops {
		select {
		case <-progress.C:
			t.Logf("%s: %d/%d operations sent", time.Since(start).Round(time.Second), i, cfg.ops)
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
	h.setFaults(false)
	h.up.calm.Store(true)
	for _, s := range h.slots {
		if !s.up.Load() {
			if err := s.start(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Every lease has expired: each operation must now go through, with no fault.
	time.Sleep(h.lease + time.Second)
	for _, s := range h.slots {
		if err := s.ready(ctx); err != nil {
			t.Fatalf("gateway %s not ready for the probes: %v", s.name, err)
		}
	}
	probeTr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer probeTr.CloseIdleConnections()
	probe := &http.Client{Transport: rotating{h: h, base: probeTr, via: func(s *slot) string { return fmt.Sprintf("127.0.0.1:%d", s.port) }}, Timeout: 20 * time.Second}
	opc = make(chan int)
	for range 16 {
		workers.Go(func() {
			for i := range opc {
				op := opName(i)
				// Only a network error is tried again (nothing is injected now, so it is rare).
				var a chaos.Answer
				for attempt := 0; attempt < 4; attempt++ {
					if a = h.deliver(ctx, probe, op, run+"-"+op, payload(op, int64(i+1)), func(a *chaos.Answer) { a.Probe = true }); a.Status != 0 {
						break
					}
				}
				h.record(a)
			}
		})
	}
	for i := range cfg.ops {
		opc <- i
	}
	close(opc)
	workers.Wait()

	v := chaos.Judge(chaos.History{Effects: h.up.effects(t), Answers: h.answers, Kills: h.kills, LostAnswers: h.lost})
	var b strings.Builder
	v.Report(&b)
	h.faultMix(&b, loadTime)
	fmt.Print("\n", b.String())
	t.Log("\n" + b.String())
	if !v.OK() {
		t.Errorf("the chaos verdict is not all zeros (gateway logs in %s are removed with the test; rerun with IDEM_CHAOS_KEEP=1 to keep the effect table)", h.dir)
	}
	if v.Ops < cfg.ops || v.Probes != cfg.ops {
		t.Errorf("judged %d operations and %d probes, want %d", v.Ops, v.Probes, cfg.ops)
	}
}

// operation sends one operation: one to three deliveries with the same key, some at once, some
// a little later; and sometimes, once it succeeded, the same key with another payload.
func (h *harness) operation(ctx context.Context, client *http.Client, run string, i int) {
	op := opName(i)
	key := run + "-" + op
	n := 1
	if h.roll() < 0.6 {
		n++
	}
	if h.roll() < 0.25 {
		n++
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	succeeded := false
	for range n {
		pause := h.between(0, 80*time.Millisecond)
		wg.Go(func() {
			time.Sleep(pause)
			a := h.deliver(ctx, client, op, key, payload(op, int64(i+1)), nil)
			h.record(a)
			if a.Status >= 200 && a.Status < 300 {
				mu.Lock()
				succeeded = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if succeeded && h.roll() < 0.03 {
		h.record(h.deliver(ctx, client, op, key, payload(op, int64(i+1)+1_000_000), func(a *chaos.Answer) { a.Mismatch = true }))
	}
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
	outcomes, takeovers := h.logOutcomes()
	names := make([]string, 0, len(outcomes))
	for k := range outcomes {
		names = append(names, k)
	}
	sort.Strings(names)
	var oc []string
	for _, k := range names {
		oc = append(oc, fmt.Sprintf("%s %d", k, outcomes[k]))
	}
	fmt.Fprintf(b, "fault mix (load phase %s, %d gateways, %s store):\n", load.Round(time.Millisecond), len(h.slots), h.cfg.storeKind)
	fmt.Fprintf(b, "  gateway kill -9: %d (gateway processes started: %d)\n", len(h.kills), starts)
	fmt.Fprintf(b, "  store server crashes and restarts: %d (down %s in all)\n", h.storeCrash, h.storeDown.Round(time.Millisecond))
	fmt.Fprintf(b, "  client→gateway proxy: %d exchanges, %d requests dropped, %d answers dropped, %d delayed\n", front.ex, front.dreq, front.dresp, front.delay)
	fmt.Fprintf(b, "  gateway→upstream proxy: %d exchanges, %d requests dropped, %d answers dropped after the upstream acted, %d delayed\n", back.ex, back.dreq, back.dresp, back.delay)
	fmt.Fprintf(b, "  upstream 503 before acting: %d; upstream inserts failed: %d\n", h.up.refused.Load(), h.up.failed.Load())
	fmt.Fprintf(b, "  client attempts %d, retries %d, gave up %d; answers 409 in flight %d, 503 %d\n",
		h.clientStats.attempts.Load(), h.clientStats.retries.Load(), h.clientStats.giveUps.Load(), h.clientStats.conflicts.Load(), h.clientStats.unavailable.Load())
	fmt.Fprintf(b, "  gateway outcomes (from their logs): %s; takeovers %d\n", strings.Join(oc, ", "), takeovers)
}
