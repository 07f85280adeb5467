package idemhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// The benchmark handler: what a small JSON API endpoint does — decode a JSON request, encode a
// JSON answer — so the bare figure is a realistic denominator, not an empty handler.
type chargeReq struct {
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

type chargeResp struct {
	ID       string `json:"id"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
}

func jsonHandler(w http.ResponseWriter, r *http.Request) {
	var in chargeReq
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(chargeResp{ID: "ch_3MmlLrLkdIwHu7ix0snN0B15", Amount: in.Amount, Currency: in.Currency, Status: "succeeded"})
}

const benchBody = `{"amount":1000,"currency":"eur"}`

// benchMiddleware is the configuration measured: memstore, the default heartbeat, a local
// cache for hot replays, default options otherwise.
func benchMiddleware(tb testing.TB) func(http.Handler) http.Handler {
	mw, err := idemhttp.New(idemhttp.Options{Runner: benchEngine(tb), Logger: quiet, Scope: idemhttp.SingleCaller()})
	if err != nil {
		tb.Fatal(err)
	}
	return mw
}

func benchEngine(tb testing.TB) *idem.Engine {
	eng, err := idem.New(memstore.New(), idem.Options{CacheSize: 4096, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	return eng
}

// engineOnly runs the handler under Engine.Do with the same engine configuration but no HTTP
// layer (no capture, no fingerprint): the engine's and the store's share of the added cost.
func engineOnly(tb testing.TB) http.Handler {
	eng := benchEngine(tb)
	fp := idem.Fingerprint([]byte(benchBody))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := eng.Do(r.Context(), r.Header.Get("Idempotency-Key"), fp, func(ctx context.Context) (idem.Response, error) {
			jsonHandler(w, r)
			return idem.Response{Status: 201}, nil
		})
		if err != nil {
			panic(err)
		}
	})
}

// discardWriter is a minimal ResponseWriter for in-process benchmarks.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) WriteHeader(s int)           { d.status = s }
func (d *discardWriter) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

// BenchmarkServeHTTP measures the middleware in process, without a network: ns and allocations
// per request for the bare handler, a new key, and a replay from the local cache. The bare
// handler is the denominator of nothing here (a real server's cost is missing); the added
// ns/op is the middleware's own cost. See BenchmarkLoopbackCPU for the ratios.
func BenchmarkServeHTTP(b *testing.B) {
	run := func(b *testing.B, h http.Handler, key func(i int) string) {
		w := &discardWriter{h: make(http.Header)}
		body := strings.NewReader(benchBody)
		req, _ := http.NewRequest("POST", "http://api/v1/charges", io.NopCloser(body))
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			body.Reset(benchBody)
			req.Header["Idempotency-Key"] = []string{key(i)}
			clear(w.h)
			h.ServeHTTP(w, req)
			if w.status != 201 {
				b.Fatal(w.status)
			}
		}
	}
	// Made per request, in every case alike: a large table of keys would make the garbage
	// collector's work depend on the benchmark rather than on the middleware.
	newKey := func(i int) string { return "k-" + strconv.Itoa(i) }
	b.Run("bare", func(b *testing.B) { run(b, http.HandlerFunc(jsonHandler), newKey) })
	b.Run("newkey", func(b *testing.B) {
		run(b, benchMiddleware(b)(http.HandlerFunc(jsonHandler)), newKey)
	})
	b.Run("replay", func(b *testing.B) {
		run(b, benchMiddleware(b)(http.HandlerFunc(jsonHandler)), func(int) string { return "same" })
	})
}

// The loopback harness: a child process runs a real http.Server with two routes, /bare (the
// handler alone) and /mw (the middleware in front of it); this process drives it over
// keep-alive connections with pre-built HTTP/1.1 requests and a minimal response reader (as
// wrk does), and reads the child's CPU time (the sum of its threads' schedstat run time, in
// ns) around each phase. CPU per request added by the middleware is then measured where it is
// spent, on the server, without the client's cost, and compared with the bare handler in the
// same run. Phases alternate over several rounds to spread the machine's noise evenly.

const benchChildEnv = "IDEMHTTP_BENCH_CHILD"

func benchChild() int {
	mux := http.NewServeMux()
	mux.HandleFunc("/bare", jsonHandler)
	mux.Handle("/mw", benchMiddleware(&testing.B{})(http.HandlerFunc(jsonHandler)))
	mux.Handle("/engine", engineOnly(&testing.B{}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr())
	if path := os.Getenv("IDEMHTTP_BENCH_CPUPROFILE"); path != "" { // profile the server
		f, err := os.Create(path)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); _ = ln.Close() }() // parent gone: exit
	_ = http.Serve(ln, mux)
	return 0
}

// cpuNanos returns the CPU time of process pid so far: the sum of its threads' run time.
func cpuNanos(pid int) (int64, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("no schedstat for %d: %v", pid, err)
	}
	var sum int64
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that just exited
		}
		v, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// rawConn sends requests and reads responses with as little work as possible.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func (rc *rawConn) roundTrip(req []byte) (int, error) {
	if _, err := rc.c.Write(req); err != nil {
		return 0, err
	}
	status, clen := 0, -1
	for {
		line, err := rc.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if status == 0 {
			status, _ = strconv.Atoi(string(line[9:12]))
			continue
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > 16 && (line[0] == 'C' || line[0] == 'c') && bytes.EqualFold(line[:15], []byte("Content-Length:")) {
			clen, _ = strconv.Atoi(string(bytes.TrimSpace(line[15:])))
		}
	}
	if clen < 0 {
		return status, fmt.Errorf("no Content-Length")
	}
	_, err := rc.br.Discard(clen)
	return status, err
}

func buildReq(path, key string) []byte {
	s := "POST " + path + " HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(benchBody)) + "\r\n"
	if key != "" {
		s += "Idempotency-Key: " + key + "\r\n"
	}
	return []byte(s + "\r\n" + benchBody)
}

// BenchmarkLoopbackCPU reports the server's CPU per request (server-ns/req) for the bare
// handler, a new key and a replay from the local cache, and the middleware's added CPU in ns
// and as a percentage of the bare figure. b.N is the number of requests per phase and round.
func BenchmarkLoopbackCPU(b *testing.B) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		b.Skip("needs /proc (Linux)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), benchChildEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	addr = strings.TrimSpace(addr)
	pid := cmd.Process.Pid

	const conns = 4
	cs := make([]*rawConn, conns)
	for i := range cs {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		cs[i] = &rawConn{c: c, br: bufio.NewReaderSize(c, 16<<10)}
	}
	bareReq := buildReq("/bare", "")
	replayReq := buildReq("/mw", "replay-key")
	if st, err := cs[0].roundTrip(replayReq); err != nil || st != 201 {
		b.Fatal(st, err)
	}
	var keyN atomic.Int64
	// Pre-build new-key requests so the client does the same work in every phase.
	phase := func(n int, req func(conn, i int) []byte, want int) (int64, error) {
		before, err := cpuNanos(pid)
		if err != nil {
			return 0, err
		}
		var wg sync.WaitGroup
		errs := make(chan error, conns)
		for ci := range cs {
			wg.Go(func() {
				for i := ci; i < n; i += conns {
					st, err := cs[ci].roundTrip(req(ci, i))
					if err == nil && st != want {
						err = fmt.Errorf("status %d", st)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return 0, err
		}
		after, err := cpuNanos(pid)
		return after - before, err
	}
	n := b.N
	newReqs := make([][]byte, n)
	const rounds = 5
	var bare, nk, rp, eng int64
	engReqs := make([][]byte, n)
	b.ResetTimer()
	for range rounds {
		b.StopTimer()
		base := keyN.Add(int64(n))
		for i := range newReqs {
			newReqs[i] = buildReq("/mw", "nk-"+strconv.FormatInt(base+int64(i), 10))
			engReqs[i] = buildReq("/engine", "nk-"+strconv.FormatInt(base+int64(i), 10))
		}
		b.StartTimer()
		d, err := phase(n, func(int, int) []byte { return bareReq }, 201)
		if err != nil {
			b.Fatal(err)
		}
		bare += d
		if d, err = phase(n, func(_, i int) []byte { return newReqs[i] }, 201); err != nil {
			b.Fatal(err)
		}
		nk += d
		if d, err = phase(n, func(int, int) []byte { return replayReq }, 201); err != nil {
			b.Fatal(err)
		}
		rp += d
		if d, err = phase(n, func(_, i int) []byte { return engReqs[i] }, 201); err != nil {
			b.Fatal(err)
		}
		eng += d
	}
	per := func(x int64) float64 { return float64(x) / float64(rounds*n) }
	b.ReportMetric(per(bare), "bare-server-ns/req")
	b.ReportMetric(per(nk), "newkey-server-ns/req")
	b.ReportMetric(per(rp), "replay-server-ns/req")
	b.ReportMetric(per(nk-bare), "newkey-added-ns/req")
	b.ReportMetric(per(rp-bare), "replay-added-ns/req")
	b.ReportMetric(per(eng-bare), "engine-only-added-ns/req")
	b.ReportMetric(100*float64(nk-bare)/float64(bare), "newkey-added-%")
	b.ReportMetric(100*float64(rp-bare)/float64(bare), "replay-added-%")
}
