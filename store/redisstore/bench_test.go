package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// benchClients is the client concurrency of the benchmarks, as redis-benchmark's default -c.
const benchClients = 50

func benchClient(b testing.TB) *redis.Client {
	addr := standalone(b).(*redis.Client).Options().Addr
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: benchClients})
	b.Cleanup(func() { rdb.Close() })
	return rdb
}

// parallel runs fn on benchClients goroutines.
func parallel(b *testing.B, fn func(pb *testing.PB, worker int)) {
	b.SetParallelism(max(1, benchClients/max(1, runtimeProcs())))
	var w atomic.Int64
	b.RunParallel(func(pb *testing.PB) { fn(pb, int(w.Add(1))) })
}

// BenchmarkNewKey is the new-key path: Reserve then Complete, two round trips. Its baseline,
// BenchmarkBaselineTwoCommands, is two plain commands (SET NX PX, then SET) from the same
// client at the same concurrency.
func BenchmarkNewKey(b *testing.B) {
	rdb := benchClient(b)
	st := newStore(b, rdb)
	fp := idem.Fingerprint([]byte("bench"))
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"0123456789"}`)}
	ctx := context.Background()
	b.ResetTimer()
	parallel(b, func(pb *testing.PB, w int) {
		for i := 0; pb.Next(); i++ {
			k := strconv.Itoa(w) + "-" + strconv.Itoa(i)
			now := time.Now()
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: time.Hour})
			if err != nil || !res.Claimed {
				b.Fatal(err, res.Claimed)
			}
			if err := st.Complete(ctx, k, res.Record.Token, resp, now, now.Add(time.Hour)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkBaselineTwoCommands(b *testing.B) {
	rdb := benchClient(b)
	prefix := fmt.Sprintf("idembench:%d:", time.Now().UnixNano())
	b.Cleanup(func() { dropPrefix(b, rdb, prefix) })
	ctx := context.Background()
	b.ResetTimer()
	parallel(b, func(pb *testing.PB, w int) {
		for i := 0; pb.Next(); i++ {
			k := prefix + strconv.Itoa(w) + "-" + strconv.Itoa(i)
			if err := rdb.SetNX(ctx, k, "1", time.Hour).Err(); err != nil {
				b.Fatal(err)
			}
			if err := rdb.Set(ctx, k, `{"id":"0123456789"}`, time.Hour).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReplay is a duplicate of a completed key: one Reserve that returns the stored
// response. Its baseline is one GET of a value of the same size.
func BenchmarkReplay(b *testing.B) {
	rdb := benchClient(b)
	st := newStore(b, rdb)
	fp := idem.Fingerprint([]byte("bench"))
	ctx := context.Background()
	now := time.Now()
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "replayed", Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Complete(ctx, "replayed", res.Record.Token, idem.Response{Status: 201, Body: []byte(`{"id":"0123456789"}`)}, now, now.Add(time.Hour)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	parallel(b, func(pb *testing.PB, _ int) {
		for pb.Next() {
			r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "replayed", Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: time.Hour})
			if err != nil || r.Claimed || r.Record.Response == nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkBaselineGet(b *testing.B) {
	rdb := benchClient(b)
	prefix := fmt.Sprintf("idembench:%d:", time.Now().UnixNano())
	b.Cleanup(func() { dropPrefix(b, rdb, prefix) })
	ctx := context.Background()
	if err := rdb.Set(ctx, prefix+"v", `{"id":"0123456789"}`, time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	parallel(b, func(pb *testing.PB, _ int) {
		for pb.Next() {
			if err := rdb.Get(ctx, prefix+"v").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestBenchVsRedisBenchmark measures the store against redis-benchmark in one session, with
// the same client concurrency (50) and no pipelining:
//   - new key (Reserve + Complete, two round trips) against half of redis-benchmark's SET rate
//     (the rate of two SETs in a row);
//   - replay (one Reserve of a completed key) against redis-benchmark's GET rate;
//   - and, to tell the client's share from the store's, plain go-redis commands in the same
//     loop: SET NX PX then SET (two round trips) and GET (one).
//
// The machine is shared, so phases are short (about a second each) and interleaved, each
// round alternating which runs first, and the figures are the medians over the rounds of the
// ratios measured within a round. It also reports the CPU time redis-server and this process
// spent per operation, which load from other processes disturbs much less than rates.
//
// Run with IDEM_REDIS_BENCH=1 go test -run TestBenchVsRedisBenchmark -v ./store/redisstore/
// (IDEM_REDIS_BENCH_ROUNDS sets the number of rounds, default 9).
func TestBenchVsRedisBenchmark(t *testing.T) {
	if os.Getenv("IDEM_REDIS_BENCH") != "1" {
		t.Skip("set IDEM_REDIS_BENCH=1 to compare with redis-benchmark")
	}
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Skip("redis-benchmark is not installed")
	}
	rounds := 9
	if v, err := strconv.Atoi(os.Getenv("IDEM_REDIS_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	rdb := benchClient(t)
	addr := rdb.Options().Addr
	host, port := addr[:len(addr)-len(portOf(addr))-1], portOf(addr)
	st := newStore(t, rdb)
	stAP := newStoreWith(t, redisstore.Options{Client: rdb, AutoPipeline: true})
	fp := idem.Fingerprint([]byte("bench"))
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"0123456789"}`)}
	ctx := context.Background()
	const dur = time.Second
	var seq atomic.Int64
	bprefix := fmt.Sprintf("idembench:%d:", time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(t, rdb, bprefix) })
	rdb.Set(ctx, bprefix+"v", `{"id":"0123456789"}`, time.Hour)
	now := time.Now()
	for _, st := range []*redisstore.Store{st, stAP} {
		if r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "replayed", Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: 2 * time.Hour}); err != nil || !r.Claimed {
			t.Fatal(err)
		} else if err := st.Complete(ctx, "replayed", r.Record.Token, resp, now, now.Add(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	// loop runs op on benchClients goroutines for dur and returns how many ran.
	loop := func(op func() error) int64 {
		var ops atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(dur)
		for range benchClients {
			wg.Go(func() {
				for time.Now().Before(stop) {
					if err := op(); err != nil {
						t.Error(err)
						return
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		return ops.Load()
	}
	newKeyOn := func(st *redisstore.Store) func() error {
		return func() error {
			k := "n" + strconv.FormatInt(seq.Add(1), 10)
			now := time.Now()
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: time.Hour})
			if err != nil || !res.Claimed {
				return fmt.Errorf("reserve: %v, claimed %v", err, res.Claimed)
			}
			return st.Complete(ctx, k, res.Record.Token, resp, now, now.Add(time.Hour))
		}
	}
	replayOn := func(st *redisstore.Store) func() error {
		return func() error {
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "replayed", Fingerprint: fp, Now: time.Now(), Lease: 30 * time.Second, TTL: time.Hour})
			if err == nil && res.Record.Response == nil {
				err = fmt.Errorf("replay without a response: %+v", res)
			}
			return err
		}
	}
	newKey, replay := newKeyOn(st), replayOn(st)
	newKeyAP, replayAP := newKeyOn(stAP), replayOn(stAP)
	plainPair := func() error {
		k := bprefix + strconv.FormatInt(seq.Add(1), 10)
		if err := rdb.SetNX(ctx, k, "1", time.Minute).Err(); err != nil {
			return err
		}
		return rdb.Set(ctx, k, `{"id":"0123456789"}`, time.Minute).Err()
	}
	plainGet := func() error { return rdb.Get(ctx, bprefix+"v").Err() }
	rateRe := regexp.MustCompile(`(?m)^"?(SET|GET)"?,"?([0-9.]+)"?`)
	theirs := func(test string) float64 {
		out, err := exec.Command("redis-benchmark", "-h", host, "-p", port, "-c", strconv.Itoa(benchClients),
			"-n", "50000", "-t", test, "-d", "19", "--csv").CombinedOutput()
		if err != nil {
			t.Fatalf("redis-benchmark: %v\n%s", err, out)
		}
		for _, m := range rateRe.FindAllStringSubmatch(string(out), -1) {
			if v, _ := strconv.ParseFloat(m[2], 64); v > 0 {
				return v
			}
		}
		t.Fatalf("could not read redis-benchmark's rate from:\n%s", out)
		return 0
	}
	redisCPU := func() float64 {
		var total float64
		for _, line := range strings.Split(rdb.Info(ctx, "cpu").Val(), "\r\n") {
			for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
				if v, ok := strings.CutPrefix(line, f); ok {
					x, _ := strconv.ParseFloat(v, 64)
					total += x
				}
			}
		}
		return total
	}
	selfCPU := func() float64 {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	// measure runs op and returns its rate and the microseconds of CPU redis-server and this
	// process spent per operation.
	type phase struct{ rate, redisUS, selfUS float64 }
	measure := func(op func() error) phase {
		r0, s0, t0 := redisCPU(), selfCPU(), time.Now()
		n := loop(op)
		d := time.Since(t0).Seconds()
		return phase{float64(n) / d, (redisCPU() - r0) / float64(n) * 1e6, (selfCPU() - s0) / float64(n) * 1e6}
	}
	var nkRatio, rpRatio, ppRatio, pgRatio, nkOfPlain, rpOfPlain, nkAPRatio, rpAPRatio []float64
	var nkCPU, ppCPU, rpCPU, pgCPU, nkAPCPU, rpAPCPU [][2]float64
	for round := range rounds {
		var set, get float64
		var nk, pp, rp, pg, nkAP, rpAP phase
		steps := []func(){
			func() { set = theirs("set") },
			func() { nkAP = measure(newKeyAP) },
			func() { nk = measure(newKey) },
			func() { pp = measure(plainPair) },
			func() { get = theirs("get") },
			func() { rpAP = measure(replayAP) },
			func() { rp = measure(replay) },
			func() { pg = measure(plainGet) },
		}
		if round%2 == 1 {
			slices.Reverse(steps)
		}
		for _, step := range steps {
			step()
		}
		nkRatio, ppRatio = append(nkRatio, nk.rate/(set/2)), append(ppRatio, pp.rate/(set/2))
		rpRatio, pgRatio = append(rpRatio, rp.rate/get), append(pgRatio, pg.rate/get)
		nkOfPlain, rpOfPlain = append(nkOfPlain, nk.rate/pp.rate), append(rpOfPlain, rp.rate/pg.rate)
		nkCPU, ppCPU = append(nkCPU, [2]float64{nk.redisUS, nk.selfUS}), append(ppCPU, [2]float64{pp.redisUS, pp.selfUS})
		rpCPU, pgCPU = append(rpCPU, [2]float64{rp.redisUS, rp.selfUS}), append(pgCPU, [2]float64{pg.redisUS, pg.selfUS})
		nkAPRatio, rpAPRatio = append(nkAPRatio, nkAP.rate/(set/2)), append(rpAPRatio, rpAP.rate/get)
		nkAPCPU, rpAPCPU = append(nkAPCPU, [2]float64{nkAP.redisUS, nkAP.selfUS}), append(rpAPCPU, [2]float64{rpAP.redisUS, rpAP.selfUS})
		t.Logf("round %d: redis-benchmark SET %.0f/s GET %.0f/s; new key %.0f/s (%.2f), auto-pipelined %.0f/s (%.2f), go-redis SET NX+SET %.0f/s (%.2f); replay %.0f/s (%.2f), auto-pipelined %.0f/s (%.2f), go-redis GET %.0f/s (%.2f)",
			round+1, set, get, nk.rate, nk.rate/(set/2), nkAP.rate, nkAP.rate/(set/2), pp.rate, pp.rate/(set/2),
			rp.rate, rp.rate/get, rpAP.rate, rpAP.rate/get, pg.rate, pg.rate/get)
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	cpu := func(v [][2]float64) string {
		var r, s []float64
		for _, x := range v {
			r, s = append(r, x[0]), append(s, x[1])
		}
		return fmt.Sprintf("redis-server %.1f µs + client %.1f µs", med(r), med(s))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("load average at the end: %s", strings.TrimSpace(string(load)))
	t.Logf("medians of %d rounds, ratio to redis-benchmark (SET rate / 2 for two round trips, GET rate for one):", rounds)
	t.Logf("  new key (Reserve + Complete) %.2f   go-redis SET NX + SET %.2f   new key / go-redis %.2f", med(nkRatio), med(ppRatio), med(nkOfPlain))
	t.Logf("  replay (Reserve)             %.2f   go-redis GET          %.2f   replay / go-redis %.2f", med(rpRatio), med(pgRatio), med(rpOfPlain))
	t.Logf("  with AutoPipeline: new key %.2f   replay %.2f", med(nkAPRatio), med(rpAPRatio))
	t.Logf("CPU per operation (medians): new key %s; go-redis SET NX + SET %s", cpu(nkCPU), cpu(ppCPU))
	t.Logf("CPU per operation (medians): replay %s; go-redis GET %s", cpu(rpCPU), cpu(pgCPU))
	t.Logf("CPU per operation (medians) with AutoPipeline: new key %s; replay %s", cpu(nkAPCPU), cpu(rpAPCPU))
	if ratio := max(med(nkRatio), med(nkAPRatio)); ratio < 0.60 {
		t.Errorf("new-key path at %.2f of redis-benchmark's rate for two round trips, below the 0.60 bar", ratio)
	}
}

func portOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	return "6379"
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
