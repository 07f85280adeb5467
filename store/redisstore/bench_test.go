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
			res, err := st.Reserve(ctx, k, fp, now, 30*time.Second, time.Hour)
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
	res, err := st.Reserve(ctx, "replayed", fp, now, 30*time.Second, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Complete(ctx, "replayed", res.Record.Token, idem.Response{Status: 201, Body: []byte(`{"id":"0123456789"}`)}, now, now.Add(time.Hour)); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	parallel(b, func(pb *testing.PB, _ int) {
		for pb.Next() {
			r, err := st.Reserve(ctx, "replayed", fp, now, 30*time.Second, time.Hour)
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
// the same client concurrency (50) and no pipelining, alternating the two three times and
// taking medians:
//   - new key (Reserve + Complete, two round trips) against half of redis-benchmark's SET rate
//     (the rate of two SETs in a row);
//   - replay (one Reserve of a completed key) against redis-benchmark's GET rate.
//
// Run with IDEM_REDIS_BENCH=1 go test -run TestBenchVsRedisBenchmark -v ./store/redisstore/
func TestBenchVsRedisBenchmark(t *testing.T) {
	if os.Getenv("IDEM_REDIS_BENCH") != "1" {
		t.Skip("set IDEM_REDIS_BENCH=1 to compare with redis-benchmark")
	}
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Skip("redis-benchmark is not installed")
	}
	rdb := benchClient(t)
	addr := rdb.Options().Addr
	host, port := addr[:len(addr)-len(portOf(addr))-1], portOf(addr)
	st := newStore(t, rdb)
	fp := idem.Fingerprint([]byte("bench"))
	resp := idem.Response{Status: 201, Body: []byte(`{"id":"0123456789"}`)}
	ctx := context.Background()
	const dur = 3 * time.Second
	var seq atomic.Int64
	ours := func(replay bool) float64 {
		if replay {
			now := time.Now()
			if r, err := st.Reserve(ctx, "replayed", fp, now, 30*time.Second, time.Hour); err == nil && r.Claimed {
				if err := st.Complete(ctx, "replayed", r.Record.Token, resp, now, now.Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
		}
		var ops atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(dur)
		start := time.Now()
		for range benchClients {
			wg.Go(func() {
				for time.Now().Before(stop) {
					now := time.Now()
					if replay {
						if _, err := st.Reserve(ctx, "replayed", fp, now, 30*time.Second, time.Hour); err != nil {
							t.Error(err)
							return
						}
					} else {
						k := "n" + strconv.FormatInt(seq.Add(1), 10)
						res, err := st.Reserve(ctx, k, fp, now, 30*time.Second, time.Hour)
						if err != nil || !res.Claimed {
							t.Error(err)
							return
						}
						if err := st.Complete(ctx, k, res.Record.Token, resp, now, now.Add(time.Hour)); err != nil {
							t.Error(err)
							return
						}
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		return float64(ops.Load()) / time.Since(start).Seconds()
	}
	// plain is the same loop with plain go-redis commands: SET NX PX then SET (two round
	// trips, like the new-key path) or GET (one, like a replay).
	bprefix := fmt.Sprintf("idembench:%d:", time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(t, rdb, bprefix) })
	rdb.Set(ctx, bprefix+"v", `{"id":"0123456789"}`, time.Hour)
	plain := func(get bool) float64 {
		var ops atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(dur)
		start := time.Now()
		for range benchClients {
			wg.Go(func() {
				for time.Now().Before(stop) {
					if get {
						if err := rdb.Get(ctx, bprefix+"v").Err(); err != nil {
							t.Error(err)
							return
						}
					} else {
						k := bprefix + strconv.FormatInt(seq.Add(1), 10)
						if err := rdb.SetNX(ctx, k, "1", time.Minute).Err(); err != nil {
							t.Error(err)
							return
						}
						if err := rdb.Set(ctx, k, `{"id":"0123456789"}`, time.Minute).Err(); err != nil {
							t.Error(err)
							return
						}
					}
					ops.Add(1)
				}
			})
		}
		wg.Wait()
		return float64(ops.Load()) / time.Since(start).Seconds()
	}
	rateRe := regexp.MustCompile(`(?m)^"?(SET|GET)"?,"?([0-9.]+)"?`)
	theirs := func() (set, get float64) {
		out, err := exec.Command("redis-benchmark", "-h", host, "-p", port, "-c", strconv.Itoa(benchClients),
			"-n", "150000", "-t", "set,get", "-d", "19", "--csv").CombinedOutput()
		if err != nil {
			t.Fatalf("redis-benchmark: %v\n%s", err, out)
		}
		for _, m := range rateRe.FindAllStringSubmatch(string(out), -1) {
			v, _ := strconv.ParseFloat(m[2], 64)
			if m[1] == "SET" {
				set = v
			} else {
				get = v
			}
		}
		if set == 0 || get == 0 {
			t.Fatalf("could not read redis-benchmark's rates from:\n%s", out)
		}
		return set, get
	}
	// cpu reports the CPU seconds Redis and this process used while fn ran, per second.
	redisCPU := func() float64 {
		info := rdb.Info(ctx, "cpu").Val()
		var total float64
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			} else if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
		return total
	}
	selfCPU := func() float64 {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	cpu := func(what string, fn func()) {
		r0, s0, t0 := redisCPU(), selfCPU(), time.Now()
		fn()
		d := time.Since(t0).Seconds()
		t.Logf("  %s: redis-server used %.2f cores, the Go client %.2f cores", what, (redisCPU()-r0)/d, (selfCPU()-s0)/d)
	}
	var newKey, replay, sets, gets, plainPairs, plainGets []float64
	for round := range 3 {
		var n, r, s, g, pp, pg float64
		cpu("go-redis SET NX + SET", func() { pp = plain(false) })
		cpu("go-redis GET", func() { pg = plain(true) })
		cpu("new key", func() { n = ours(false) })
		cpu("replay", func() { r = ours(true) })
		cpu("redis-benchmark", func() { s, g = theirs() })
		newKey, replay, sets, gets = append(newKey, n), append(replay, r), append(sets, s), append(gets, g)
		plainPairs, plainGets = append(plainPairs, pp), append(plainGets, pg)
		t.Logf("round %d: new key %.0f/s, replay %.0f/s; go-redis SET NX+SET %.0f/s, GET %.0f/s; redis-benchmark SET %.0f/s, GET %.0f/s",
			round+1, n, r, pp, pg, s, g)
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	nk, rp, s, g := med(newKey), med(replay), med(sets), med(gets)
	t.Logf("medians: new key %.0f/s (2 round trips) vs SET %.0f/s / 2 = %.0f/s: ratio %.2f", nk, s, s/2, nk/(s/2))
	t.Logf("medians: replay %.0f/s (1 round trip) vs GET %.0f/s: ratio %.2f", rp, g, rp/g)
	pp, pg := med(plainPairs), med(plainGets)
	t.Logf("medians: go-redis SET NX+SET %.0f/s: new key at %.2f of it; go-redis GET %.0f/s: replay at %.2f of it", pp, nk/pp, pg, rp/pg)
	t.Logf("medians: go-redis itself at %.2f (two commands) and %.2f (GET) of redis-benchmark", pp/(s/2), pg/g)
	if ratio := nk / (s / 2); ratio < 0.60 {
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
