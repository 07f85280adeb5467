package idemhttp_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// The slow-body harness: a child process runs a real http.Server whose handler reads the
// request body, bare or behind the middleware (IDEMHTTP_SLOWBODY_CHILD=bare or mw); this
// process opens many connections that each declare the largest body the middleware accepts
// and send one byte, then reads the child's resident memory (VmRSS in /proc/PID/status) before,
// while they wait (a second wave of them), and after they are gone. The bare server is the baseline: what net/http
// itself costs per connection.

const slowBodyChildEnv = "IDEMHTTP_SLOWBODY_CHILD"

func slowBodyChild(mode string) int {
	var started, inflight atomic.Int64
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			return
		}
		w.WriteHeader(201)
	})
	var h http.Handler = read
	if mode == "mw" {
		h = benchMiddleware(&testing.B{})(read)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		inflight.Add(1)
		defer inflight.Add(-1)
		h.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d %d", started.Load(), inflight.Load())
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(ln.Addr())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); _ = ln.Close() }() // parent gone: exit
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	_ = srv.Serve(ln)
	return 0
}

// vmKiB returns a field of /proc/PID/status (VmRSS, VmHWM), in KiB.
func vmKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// slowBodyRun is one phase's figures, in KiB of the child's resident memory.
type slowBodyRun struct {
	before, during, peak, after int64
}

// runSlowBodies starts a child in mode, opens conns connections declaring declared bytes and
// sending one, twice, and measures.
func runSlowBodies(tb testing.TB, mode string, conns int, declared int64) slowBodyRun {
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), slowBodyChildEnv+"="+mode)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatal(err)
	}
	addr = strings.TrimSpace(addr)
	pid := cmd.Process.Pid
	count := func() (started, inflight int64) {
		resp, err := http.Get("http://" + addr + "/count")
		if err != nil {
			tb.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = fmt.Fscan(resp.Body, &started, &inflight)
		return started, inflight
	}
	waitFor := func(what string, cond func(started, inflight int64) bool) {
		deadline := time.Now().Add(120 * time.Second)
		for !cond(count()) {
			if time.Now().After(deadline) {
				s, i := count()
				tb.Fatalf("%s: waited 120s for %s (%d started, %d in flight)", mode, what, s, i)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Warm up: one whole request, so pools and the first connection's buffers exist.
	req := "POST /slow HTTP/1.1\r\nHost: b\r\nIdempotency-Key: warm\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	if c, err := net.Dial("tcp", addr); err == nil {
		_, _ = c.Write([]byte(req))
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}
	waitFor("the warm-up", func(s, i int64) bool { return s == 1 && i == 0 })
	time.Sleep(200 * time.Millisecond)
	var r slowBodyRun
	r.before, _ = vmKiB(pid, "VmRSS")
	// Two waves: memory freed by the first and reused by the second is memory the process
	// touches, so the second shows what a server under a sustained attack holds.
	for wave := range 2 {
		cs := make([]net.Conn, 0, conns)
		for i := range conns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				tb.Fatal(err)
			}
			cs = append(cs, c)
			head := "POST /slow HTTP/1.1\r\nHost: b\r\nIdempotency-Key: slow-" + strconv.Itoa(wave) + "-" + strconv.Itoa(i) +
				"\r\nContent-Length: " + strconv.FormatInt(declared, 10) + "\r\n\r\n{"
			if _, err := c.Write([]byte(head)); err != nil {
				tb.Fatal(err)
			}
		}
		waitFor("every connection to reach the handler", func(s, i int64) bool { return s == int64(wave+1)*int64(conns)+1 && i == int64(conns) })
		time.Sleep(500 * time.Millisecond)
		r.during, _ = vmKiB(pid, "VmRSS")
		for _, c := range cs {
			c.Close()
		}
		waitFor("every connection to be gone", func(_, i int64) bool { return i == 0 })
	}
	time.Sleep(3 * time.Second) // the runtime returns freed memory to the system in the background
	r.after, _ = vmKiB(pid, "VmRSS")
	r.peak, _ = vmKiB(pid, "VmHWM")
	return r
}

// BenchmarkSlowBodies: 2,000 connections each declare the largest body
// (DefaultMaxRequestBody, 1 MiB) and send one byte, against a bare net/http server that reads
// its body (the baseline) and the same server behind the middleware, in the same run, phases
// alternating. It reports the resident memory each connection of the second wave adds while
// they wait (bare-KiB/conn, mw-KiB/conn), the middleware's share (mw-added-KiB/conn), each
// server's peak (bare-peak-MiB, mw-peak-MiB) and what it still holds 3 s after the connections
// are gone, over its resident memory before them (bare-kept-MiB, mw-kept-MiB).
func BenchmarkSlowBodies(b *testing.B) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("needs /proc (Linux)")
	}
	const conns, rounds = 2000, 2
	var bare, mw, barePeak, mwPeak, bareAfter, mwAfter float64
	for b.Loop() {
		for range rounds {
			rb := runSlowBodies(b, "bare", conns, idemhttp.DefaultMaxRequestBody)
			rm := runSlowBodies(b, "mw", conns, idemhttp.DefaultMaxRequestBody)
			b.Logf("bare: %+v KiB; mw: %+v KiB", rb, rm)
			bare += float64(rb.during-rb.before) / conns
			mw += float64(rm.during-rm.before) / conns
			barePeak = max(barePeak, float64(rb.peak)/1024)
			mwPeak = max(mwPeak, float64(rm.peak)/1024)
			bareAfter = max(bareAfter, float64(rb.after-rb.before)/1024)
			mwAfter = max(mwAfter, float64(rm.after-rm.before)/1024)
		}
	}
	n := float64(rounds * b.N)
	b.ReportMetric(bare/n, "bare-KiB/conn")
	b.ReportMetric(mw/n, "mw-KiB/conn")
	b.ReportMetric((mw-bare)/n, "mw-added-KiB/conn")
	b.ReportMetric(barePeak, "bare-peak-MiB")
	b.ReportMetric(mwPeak, "mw-peak-MiB")
	b.ReportMetric(bareAfter, "bare-kept-MiB")
	b.ReportMetric(mwAfter, "mw-kept-MiB")
}
