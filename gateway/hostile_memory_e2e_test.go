package gateway_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// vmKiB returns a field of /proc/PID/status (VmRSS, VmHWM), in KiB.
func vmKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// settledRSS waits until the resident memory of pid stops growing (three samples 200ms apart
// within 1 MiB of each other, at most 30s) and returns it in KiB.
func settledRSS(t *testing.T, pid int) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last, steady := vmKiB(t, pid, "VmRSS"), 0
	for steady < 3 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		n := vmKiB(t, pid, "VmRSS")
		if n-last < 1024 {
			steady++
		} else {
			steady = 0
		}
		last = max(last, n)
	}
	return last
}

// TestBinarySlowBodiesMemory: hundreds of connections each declare the largest body and send
// one byte. The gateway's resident memory grows by what arrived and what each connection costs,
// never by what was declared: it stays under the middleware's memory budget (the default,
// 64 MiB) plus a per-connection figure, and the gateway goes on serving.
func TestBinarySlowBodiesMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc (Linux)")
	}
	t.Parallel()
	const (
		conns   = 400
		waves   = 3
		maxBody = 1 << 20
		perConn = 64 << 10 // net/http's and the proxy's own cost of a connection, generously
	)
	api, up := upstream(t)
	g := startGateway(t, "--upstream", up, "--store", sqliteStore(t), "--max-body", strconv.Itoa(maxBody))
	pid := g.cmd.Process.Pid
	if a := post(t, g.url, "warm", charge); a.status != 201 {
		t.Fatalf("warm-up: %d %s", a.status, a.body)
	}
	before := settledRSS(t, pid)
	limit := int64(idemhttp.DefaultMemoryBudget+conns*perConn) >> 10
	addr := strings.TrimPrefix(g.url, "http://")
	// Several waves: memory freed by one wave and reused by the next is memory the process
	// touches, so a buffer sized from the declared length shows in the RSS from the second
	// wave on, if not in the first.
	for wave := range waves {
		cs := make([]net.Conn, 0, conns)
		for i := range conns {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, c)
			head := "POST /v1/charges HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nIdempotency-Key: slow-" +
				strconv.Itoa(wave) + "-" + strconv.Itoa(i) + "\r\nContent-Length: " + strconv.Itoa(maxBody) + "\r\n\r\n{"
			if _, err := c.Write([]byte(head)); err != nil {
				t.Fatal(err)
			}
		}
		during := settledRSS(t, pid)
		// The gateway still serves while they wait.
		a := post(t, g.url, "during-"+strconv.Itoa(wave), charge)
		for _, c := range cs {
			c.Close()
		}
		t.Logf("wave %d: %d connections declaring %d bytes, sending 1: RSS %d KiB before, %d KiB with them (%d KiB each); limit %d KiB",
			wave, conns, maxBody, before, during, (during-before)/conns, limit)
		if during-before > limit {
			t.Fatalf("RSS grew by %d KiB for %d connections that sent 1 byte each; limit %d KiB (declared: %d KiB)",
				during-before, conns, limit, conns*maxBody>>10)
		}
		if a.status != 201 {
			t.Fatalf("a request beside the slow ones: %d %s", a.status, a.body)
		}
		time.Sleep(time.Second)
	}
	after, peak := settledRSS(t, pid), vmKiB(t, pid, "VmHWM")
	t.Logf("after the waves: RSS %d KiB, peak %d KiB", after, peak)
	if peak-before > limit {
		t.Fatalf("peak RSS %d KiB, %d KiB over the start; limit %d KiB", peak, peak-before, limit)
	}
	if a := post(t, g.url, "after", charge); a.status != 201 {
		t.Fatalf("after the slow connections: %d %s", a.status, a.body)
	}
	if n := api.Count(); n != waves+2 {
		t.Fatalf("charges = %d, want %d (the cut-short bodies must not reach the upstream)", n, waves+2)
	}
}

// TestBinaryMemoryBudgetFlag: with --memory-budget, slow connections beyond the budget get 503
// problems/overloaded with Retry-After at once, nothing reaches the upstream for them, and the
// budget is free again once they are gone.
func TestBinaryMemoryBudgetFlag(t *testing.T) {
	t.Parallel()
	const (
		conns   = 300
		budget  = 1 << 20 // room for about 128 requests of 8 KiB
		maxBody = 1 << 20
	)
	api, up := upstream(t)
	g := startGateway(t, "--upstream", up, "--store", sqliteStore(t), "--max-body", strconv.Itoa(maxBody),
		"--memory-budget", strconv.Itoa(budget))
	addr := strings.TrimPrefix(g.url, "http://")
	pid := g.cmd.Process.Pid
	if a := post(t, g.url, "warm", charge); a.status != 201 {
		t.Fatalf("warm-up: %d %s", a.status, a.body)
	}
	before := settledRSS(t, pid)
	type refusal struct {
		status     int
		retryAfter string
		ctype      string
	}
	answers := make(chan refusal, conns)
	cs := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
		head := "POST /v1/charges HTTP/1.1\r\nHost: g\r\nContent-Type: application/json\r\nIdempotency-Key: budget-" +
			strconv.Itoa(i) + "\r\nContent-Length: " + strconv.Itoa(maxBody) + "\r\n\r\n{"
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return // still waiting for its body when the test closes it
			}
			resp.Body.Close()
			answers <- refusal{resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type")}
		}()
	}
	// Those over the budget are answered at once; those within it wait for their bodies.
	refused := 0
	deadline := time.After(20 * time.Second)
	for refused < conns-budget/(8<<10) {
		select {
		case a := <-answers:
			if a.status != http.StatusServiceUnavailable || a.retryAfter == "" || !strings.Contains(a.ctype, "problem+json") {
				t.Fatalf("a connection over the budget got %d, Retry-After %q, %s", a.status, a.retryAfter, a.ctype)
			}
			refused++
		case <-deadline:
			t.Fatalf("%d of %d connections refused after 20s under a budget of %d bytes", refused, conns, budget)
		}
	}
	during := settledRSS(t, pid)
	limit := int64(budget+conns*(64<<10)) >> 10
	t.Logf("%d connections under a budget of %d bytes: %d refused; RSS %d KiB before, %d KiB with them; limit %d KiB",
		conns, budget, refused, before, during, limit)
	if during-before > limit {
		t.Fatalf("RSS grew by %d KiB; limit %d KiB", during-before, limit)
	}
	for _, c := range cs {
		c.Close()
	}
	cs = nil
	// The budget comes back: a request with a body passes once the slow ones are gone.
	var a answer
	for range 50 {
		if a = post(t, g.url, "after", charge); a.status != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a.status != 201 {
		t.Fatalf("after the slow connections: %d %s", a.status, a.body)
	}
	if n := api.Count(); n != 2 {
		t.Fatalf("charges = %d, want 2 (the warm-up and the last request)", n)
	}
}

// TestBinaryMemoryStoreBounded: `idem serve --store memory://?max_records=N` takes N new keys,
// then answers a new key 503 (the store is full, nothing runs upstream) while every key it
// holds still replays; without the bound a caller could fill the process's memory with keys.
func TestBinaryMemoryStoreBounded(t *testing.T) {
	t.Parallel()
	api, up := upstream(t)
	g := startGateway(t, "--upstream", up, "--store", "memory://?max_records=20")
	first := map[string]answer{}
	for i := range 20 {
		key := fmt.Sprint("bounded-", i)
		a := post(t, g.url, key, charge)
		if a.status != http.StatusCreated {
			t.Fatalf("key %d of 20: %d %s", i, a.status, a.body)
		}
		first[key] = a
	}
	a := post(t, g.url, "bounded-20", charge)
	if a.status != http.StatusServiceUnavailable || api.Count() != 20 {
		t.Fatalf("a 21st key in a store of 20: %d %s (charges %d), want 503 and no charge", a.status, a.body, api.Count())
	}
	for key, want := range first {
		if b := post(t, g.url, key, charge); b.status != http.StatusCreated || b.body != want.body || b.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay of %s in a full store: %d %q, want %q replayed", key, b.status, b.body, want.body)
		}
	}
	if api.Count() != 20 {
		t.Fatalf("%d charges, want 20", api.Count())
	}
}
