package sweeper_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/gateway"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/sweeper"
)

// TestBenchSweepGateway measures the gateway's new-key rate on PostgreSQL while the paced
// background sweeper (the options idem serve gives it) removes a backlog of expired records,
// against the rate without a sweep, in alternating windows of one run, until the backlog is
// gone (the time it took is reported); then the same for the unpaced sweep (sweeper.Sweep,
// batch after batch). It runs with IDEM_SWEEP_BENCH=1 and writes its report to
// IDEM_SWEEP_BENCH_OUT if set. IDEM_SWEEP_BENCH_RECORDS (default 1000000), _WINDOW (8s),
// _MAX_ROUNDS (200, of the paced sweep) and _ROUNDS (2, of the unpaced sweep) size it.
func TestBenchSweepGateway(t *testing.T) {
	if os.Getenv("IDEM_SWEEP_BENCH") != "1" {
		t.Skip("a benchmark: set IDEM_SWEEP_BENCH=1 to run it (scripts/bench.sh does)")
	}
	records := envInt("IDEM_SWEEP_BENCH_RECORDS", 1_000_000)
	rounds := envInt("IDEM_SWEEP_BENCH_ROUNDS", 2) // of the unpaced sweep
	window := time.Duration(envInt("IDEM_SWEEP_BENCH_WINDOW", 8)) * time.Second
	// The paced sweep's rounds go on until the backlog is gone, up to maxRounds.
	maxRounds := envInt("IDEM_SWEEP_BENCH_MAX_ROUNDS", 200)
	const clients = 16
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	table := randomName("bench_")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1","status":"succeeded"}`))
	}))
	defer up.Close()
	g, err := gateway.New(ctx, gateway.Config{Upstream: up.URL, Scope: gateway.ScopeNone,
		Store: url + sep + "schema=" + testSchema + "&table=" + table}, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = g.Close() }()
	defer func() {
		_, _ = pool.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %q.%q`, testSchema, table))
		_, _ = pool.Exec(ctx, fmt.Sprintf(`DELETE FROM %q.idem_migrations WHERE tbl = $1`, testSchema), table)
	}()
	srv := httptest.NewServer(g)
	defer srv.Close()
	qt := fmt.Sprintf(`%q.%q`, testSchema, table)

	// backlog inserts n expired records, expiries spread over the past hour, and vacuums them
	// as old rows would be.
	backlog := func(from, n int) time.Duration {
		start := time.Now()
		now := time.Now().UnixMicro()
		if _, err := pool.Exec(ctx, `INSERT INTO `+qt+` (key, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at)
			SELECT '|old-' || i, repeat('a', 64), 2, 1, $1::bigint - 3600000000 - 1000000, 1, convert_to(repeat('x', 120), 'UTF8'),
				$1::bigint - 7200000000, $1::bigint - 7200000000, $1::bigint - 3600000000 + (i - $2::bigint) * (3600000000 / $3::bigint)
			FROM generate_series($2::bigint, $2::bigint + $3::bigint - 1) AS i`, now, from, n); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+qt); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	expiredLeft := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+qt+` WHERE expires_at <= $1`, time.Now().UnixMicro()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// The load: clients posting new keys without pause.
	var done atomic.Int64
	var failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	body := []byte(`{"amount":1000,"currency":"eur"}`)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", bytes.NewReader(body))
				req.Header.Set("Idempotency-Key", "new-"+strconv.Itoa(c)+"-"+strconv.Itoa(i)+"-"+table)
				resp, err := hc.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusCreated {
					done.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	rate := func(d time.Duration) float64 {
		n0, t0 := done.Load(), time.Now()
		time.Sleep(d)
		return float64(done.Load()-n0) / time.Since(t0).Seconds()
	}
	// serve's background sweeper, but starting at once, and one for the whole backlog, as in
	// serve: it counts the backlog as a run begins (and once a minute while behind) and pays
	// for that count within its share. During the windows without a sweep it is held in its
	// pause between two calls (a gate in its sleep), so it does nothing there and its pacing
	// measures only its store calls.
	var gate sync.Mutex // held: the sweeper waits before its next call
	gatedSleep := func(ctx context.Context, d time.Duration) bool {
		if d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return false
			case <-t.C:
			}
		}
		gate.Lock()
		//lint:ignore SA2001 an empty critical section: it waits while the gate is held
		gate.Unlock()
		return ctx.Err() == nil
	}
	st := &callCounter{st: g.Store().(gatewayStore)}
	hold := func() { // holds the gate, then waits for the sweeper's call in flight to end
		gate.Lock()
		for idle := 0; idle < 3; { // three looks 1ms apart: one just past the gate shows too
			if idle++; st.calls.Load() != 0 {
				idle = 0
			}
			time.Sleep(time.Millisecond)
		}
	}

	var rep strings.Builder
	p := func(format string, args ...any) {
		fmt.Fprintf(&rep, format+"\n", args...)
		t.Logf(format, args...)
	}
	took := backlog(0, records)
	p("Backlog: %d expired records inserted with generate_series and vacuumed in %s.", records, took.Round(time.Second))
	rate(2 * time.Second) // warm up
	p("")
	p("| round | without a sweep (new keys/s) | paced sweep running (new keys/s) | ratio | records swept in the window |")
	p("| --- | --- | --- | --- | --- |")
	var ratios []float64
	var sweptTime time.Duration
	hold()
	sw, err := sweeper.Start(st, sweeper.WithClock(sweeper.Options{Interval: 200 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), OnEvent: g.Metrics().ObserveSweep}, time.Now, gatedSleep))
	if err != nil {
		t.Fatal(err)
	}
	left := expiredLeft()
	wallStart := time.Now()
	for r := 0; left > 0 && r < maxRounds; r++ {
		// Half a window without a sweep before the sweep's window and half a window after it:
		// a load that drifts during the round moves both sides alike.
		base := rate(window / 2)
		gate.Unlock()
		t0 := time.Now()
		during := rate(window)
		hold()
		sweptTime += time.Since(t0)
		before := left
		left = expiredLeft()
		base = (base + rate(window/2)) / 2
		ratios = append(ratios, during/base)
		p("| %d | %.0f | %.0f | %.3f | %d |", r+1, base, during, during/base, before-left)
	}
	wall := time.Since(wallStart)
	gate.Unlock()
	sw.Stop()
	p("")
	p("Paced sweep (idem serve's options: MaxShare 0.1, Batch 1000, TargetLatency 100ms): median ratio **%.3f** (min %.3f, max %.3f) over %d rounds.",
		median(ratios), minOf(ratios), maxOf(ratios), len(ratios))
	if left == 0 {
		p("The backlog of %d records was gone after **%s** of paced sweeping under load (%.0f records/s while the sweeper ran; %s of wall time with the windows without a sweep).",
			records, sweptTime.Round(time.Second), float64(records)/sweptTime.Seconds(), wall.Round(time.Second))
	} else {
		p("After %s of paced sweeping under load, %d of the %d records were left (%.0f records/s while the sweeper ran).",
			sweptTime.Round(time.Second), left, records, float64(records-left)/sweptTime.Seconds())
	}

	// The unpaced sweep, as idem sweep did it: batch after batch until a short one.
	p("")
	p("| round | without a sweep (new keys/s) | unpaced sweep running (new keys/s) | ratio | records swept | sweep took |")
	p("| --- | --- | --- | --- | --- | --- |")
	var unpaced []float64
	per := records / 2
	for r := range rounds {
		backlog(records+r*per, per)
		base := rate(window)
		n0, t0 := done.Load(), time.Now()
		n, err := sweeper.Sweep(ctx, g.Store(), time.Now(), 1000, math.MaxInt, 0)
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		during := float64(done.Load()-n0) / d.Seconds()
		unpaced = append(unpaced, during/base)
		p("| %d | %.0f | %.0f | %.3f | %d | %s |", r+1, base, during, during/base, n, d.Round(time.Millisecond))
	}
	p("")
	p("Unpaced sweep: median ratio **%.3f** over %d rounds. Requests that failed during the whole run: %d.", median(unpaced), len(unpaced), failed.Load())
	if out := os.Getenv("IDEM_SWEEP_BENCH_OUT"); out != "" {
		doc := "# Sweeping a backlog of expired records while the gateway serves\n\n" +
			"The gateway (in process, PostgreSQL store, " + strconv.Itoa(clients) + " clients posting new keys to an upstream that answers 201 at once)\n" +
			"with idem serve's paced background sweeper working through a backlog of expired records, measured in rounds until the\n" +
			"backlog is gone: half of " + window.String() + " with the sweeper held between two calls, " + window.String() + " with it running, half of " + window.String() + "\n" +
			"held again (the rate without a sweep is the mean of the two halves, so a load that drifts moves both sides alike).\n" +
			"One sweeper does the whole backlog, as in serve: it counts the backlog when a run begins and pays for the count within its\n" +
			"share. Then the unpaced sweep (`sweeper.Sweep`, batch after batch, as `idem sweep` runs without `--max-share`) on a fresh\n" +
			"backlog of half the size, against the rate just before it. Ratio = new keys/s during ÷ without. Measured " + time.Now().UTC().Format("2006-01-02 15:04 UTC") +
			" with `IDEM_SWEEP_BENCH=1 go test -run TestBenchSweepGateway ./store/sweeper/`.\n\n" + rep.String()
		if !filepath.IsAbs(out) {
			out = filepath.Join("..", "..", out) // relative to the module's root, where scripts/bench.sh runs
		}
		if err := os.WriteFile(out, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if m := median(ratios); m < 0.9 {
		t.Errorf("median ratio while the paced sweeper runs %.3f, want at least 0.9", m)
	}
	if left > 0 {
		t.Errorf("%d expired records left after the paced sweep", left)
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func maxOf(xs []float64) float64 {
	m := math.Inf(-1)
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func minOf(xs []float64) float64 {
	m := math.Inf(1)
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

// callCounter is a store whose Sweep and CountExpired calls in flight are counted.
type callCounter struct {
	st    gatewayStore
	calls atomic.Int32
}

type gatewayStore interface {
	sweeper.Sweepable
	sweeper.ExpiredCounter
}

func (c *callCounter) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	c.calls.Add(1)
	defer c.calls.Add(-1)
	return c.st.Sweep(ctx, now, batch)
}

func (c *callCounter) CountExpired(ctx context.Context, now time.Time, limit int) (int, error) {
	c.calls.Add(1)
	defer c.calls.Add(-1)
	return c.st.CountExpired(ctx, now, limit)
}
