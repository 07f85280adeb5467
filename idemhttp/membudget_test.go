package idemhttp_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// budgetBundle is a loopback server with the middleware, and the bytes it holds.
type budgetBundle struct {
	*bundle
	held func() int64
}

func setupBudget(t *testing.T, opt idemhttp.Options, h http.Handler) *budgetBundle {
	t.Helper()
	st := memstore.New()
	eng, err := idem.New(st, idem.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{t: t, eng: eng, store: st}
	opt.Runner, opt.Logger = eng, quiet
	opt.OnEvent = func(ev idemhttp.Event) {
		ev.Request = nil
		b.mu.Lock()
		b.events = append(b.events, ev)
		b.mu.Unlock()
	}
	mw, held, err := idemhttp.NewCounted(opt)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = httptest.NewUnstartedServer(mw(h))
	b.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	return &budgetBundle{bundle: b, held: held}
}

// slowConn sends a POST declaring a body of declared bytes and sends only the first part of it,
// then waits: a client that trickles its body, or an attacker.
func (b *budgetBundle) slowConn(t *testing.T, key string, declared int64, part []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", b.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	head := "POST /charges HTTP/1.1\r\nHost: t\r\nIdempotency-Key: " + key +
		"\r\nContent-Length: " + strconv.FormatInt(declared, 10) + "\r\n\r\n"
	if _, err := c.Write(append([]byte(head), part...)); err != nil {
		t.Fatal(err)
	}
	return c
}

// waitHeld waits until cond holds of the bytes the middleware holds, and returns them.
func (b *budgetBundle) waitHeld(t *testing.T, what string, cond func(int64) bool) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := b.held()
		if cond(n) {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the middleware holds %d bytes; waited 30s for %s", n, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestSlowBodiesHoldOnlyWhatArrived: many clients declare the largest body and send one byte.
// The middleware must hold memory for the bytes received, not for the bytes declared, and give
// all of it back when the clients go away. Not parallel: it measures the heap.
func TestSlowBodiesHoldOnlyWhatArrived(t *testing.T) {
	const conns = 200
	const maxBody = 1 << 20
	var ran atomic.Int64
	b := setupBudget(t, idemhttp.Options{MaxRequestBody: maxBody, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
	}))
	// Warm the server and the pools, then measure from there.
	if r := b.do("POST", "/charges", "warm", "{}"); r.Status != 200 {
		t.Fatalf("warm-up: %d %s", r.Status, r.Body)
	}
	b.waitHeld(t, "the warm-up to give back its buffers", func(n int64) bool { return n == 0 })
	ran.Store(0)
	before := heapAlloc()
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = b.slowConn(t, fmt.Sprintf("slow-%d", i), maxBody, []byte("{"))
	}
	// Each request holds its two pooled buffers (4 KiB each when fresh, at most 64 KiB each
	// when a pooled one grew earlier); the declared megabyte would be 1 MiB each.
	held := b.waitHeld(t, "every request to be reading its body", func(n int64) bool { return n >= conns*8<<10 })
	if held > conns*128<<10 {
		t.Fatalf("%d requests that sent 1 byte each hold %d bytes (%d each)", conns, held, held/conns)
	}
	grown := int64(heapAlloc()) - int64(before)
	t.Logf("%d connections declaring %d bytes and sending 1: the middleware holds %d bytes (%d each), the heap grew %d bytes (%d each)",
		conns, maxBody, held, held/conns, grown, grown/conns)
	// The declared bodies would be 200 MiB; a connection costs net/http and the test client
	// some tens of KiB (buffers, goroutine stacks are not in HeapAlloc).
	if grown > 40<<20 {
		t.Fatalf("the heap grew by %d bytes (%d per connection) for %d connections that sent 1 byte each", grown, grown/conns, conns)
	}
	for _, c := range cs {
		c.Close()
	}
	b.waitHeld(t, "the budget to come back to 0 once the clients are gone", func(n int64) bool { return n == 0 })
	if n := ran.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for bodies cut short", n)
	}
}

// TestMemoryBudgetRefusesBeforeTheClaim: with the budget held by a request whose body is on
// its way, another request gets 503 ProblemOverloaded with Retry-After, the handler does not
// run, and no claim is left behind: the same key, retried once memory is free, executes.
func TestMemoryBudgetRefusesBeforeTheClaim(t *testing.T) {
	t.Parallel()
	const budget = 256 << 10
	var ran atomic.Int64
	b := setupBudget(t, idemhttp.Options{MemoryBudget: budget, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(201)
	}))
	// A request alone is served whatever its size: this one holds more than the budget.
	holder := b.slowConn(t, "holder", 1<<20, bytes.Repeat([]byte("x"), 300<<10))
	b.waitHeld(t, "the holder to hold more than the budget", func(n int64) bool { return n > budget })

	r := b.do("POST", "/charges", "refused", `{"amount":1}`)
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("over the budget: %d, Retry-After %q, %s; want 503 and Retry-After 1", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	if pt := problemType(t, r); pt != idemhttp.ProblemOverloaded {
		t.Fatalf("problem type %s, want %s", pt, idemhttp.ProblemOverloaded)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for a refused request", n)
	}
	if _, err := b.store.Get(t.Context(), idemhttp.StorageKey("", "refused")); err == nil {
		t.Fatal("a refused request left a record behind")
	}

	holder.Close()
	b.waitHeld(t, "the holder's memory to come back", func(n int64) bool { return n == 0 })
	if r := b.do("POST", "/charges", "refused", `{"amount":1}`); r.Status != 201 {
		t.Fatalf("the refused key retried with memory free: %d %s, want 201", r.Status, r.Body)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
	outs := b.outcomes()
	if len(outs) < 2 || outs[0] != idemhttp.OutcomeOverloaded || outs[len(outs)-1] != idemhttp.OutcomeExecuted {
		t.Fatalf("outcomes %v, want overloaded first and executed last", outs)
	}
	b.waitHeld(t, "the budget to come back to 0", func(n int64) bool { return n == 0 })
}

// TestMemoryBudgetBoundsManySlowBodies: many clients trickle their bodies at once, each
// past the initial buffer; the middleware never holds much more than the budget, those it
// cannot hold get 503 + Retry-After, and everything comes back when they finish.
func TestMemoryBudgetBoundsManySlowBodies(t *testing.T) {
	t.Parallel()
	const (
		budget = 1 << 20
		conns  = 64
		part   = 40 << 10 // grows a request's buffer to 64 KiB
	)
	b := setupBudget(t, idemhttp.Options{MemoryBudget: budget, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(201)
	}))
	var wg sync.WaitGroup
	var ok, refused, bad atomic.Int64
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				if n := b.held(); n > peak.Load() {
					peak.Store(n)
				}
			}
		}
	}()
	body := bytes.Repeat([]byte("y"), 2*part)
	for i := range conns {
		c := b.slowConn(t, fmt.Sprintf("many-%d", i), int64(len(body)), body[:part])
		wg.Go(func() {
			br := bufio.NewReader(c)
			// The rest of the body later, unless the server has answered already.
			_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			if _, err := br.Peek(1); err != nil {
				_ = c.SetReadDeadline(time.Time{})
				if _, err := c.Write(body[part:]); err != nil {
					bad.Add(1)
					return
				}
			}
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				bad.Add(1)
				return
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode == 201:
				ok.Add(1)
			case resp.StatusCode == 503 && resp.Header.Get("Retry-After") != "" && resp.Header.Get("Content-Type") == idemhttp.ProblemContentType:
				refused.Add(1)
			default:
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	t.Logf("%d slow clients, budget %d: %d served, %d refused; the middleware held at most %d bytes", conns, budget, ok.Load(), refused.Load(), peak.Load())
	if bad.Load() != 0 || ok.Load()+refused.Load() != conns {
		t.Fatalf("%d served, %d refused, %d other answers or errors", ok.Load(), refused.Load(), bad.Load())
	}
	if refused.Load() == 0 {
		t.Fatalf("%d clients each holding about %d bytes under a budget of %d: none refused", conns, 64<<10, budget)
	}
	// A request is refused before it goes over; the one allowed excess is a request alone,
	// and a growth racing another's refusal: one largest buffer (128 KiB here, pooled ones
	// included) more than the budget.
	if p := peak.Load(); p > budget+128<<10 {
		t.Fatalf("the middleware held %d bytes under a budget of %d", p, budget)
	}
	b.waitHeld(t, "the budget to come back to 0", func(n int64) bool { return n == 0 })
}

// TestMemoryBudgetResponseNotRetained: a response whose capture would take memory over the
// budget is streamed whole to the client and not retained, as one over MaxResponseBody: a
// retry gets ProblemNotRetained with the original status, never a second execution.
func TestMemoryBudgetResponseNotRetained(t *testing.T) {
	t.Parallel()
	const budget = 256 << 10
	var ran atomic.Int64
	big := strings.Repeat("z", 600<<10)
	b := setupBudget(t, idemhttp.Options{MemoryBudget: budget, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(201)
		for i := 0; i < len(big); i += 4 << 10 {
			_, _ = io.WriteString(w, big[i:i+4<<10])
		}
	}))
	// Another request holds part of the budget while the big response is written.
	b.slowConn(t, "holder", 1<<20, bytes.Repeat([]byte("x"), 100<<10))
	b.waitHeld(t, "the holder to hold its body", func(n int64) bool { return n > 100<<10 })

	r := b.do("POST", "/big", "big", "{}")
	if r.Status != 201 || r.Err != nil || string(r.Body) != big {
		t.Fatalf("first answer: %d, %d bytes, err %v; want 201 and the %d bytes written", r.Status, len(r.Body), r.Err, len(big))
	}
	r2 := b.do("POST", "/big", "big", "{}")
	if r2.Status != 201 || r2.Header.Get(idemhttp.ReplayedHeader) != "true" || r2.Header.Get("Content-Type") != idemhttp.ProblemContentType {
		t.Fatalf("retry: %d, %d bytes of %s, want a 201 ProblemNotRetained replay", r2.Status, len(r2.Body), r2.Header.Get("Content-Type"))
	}
	if pt := problemType(t, r2); pt != idemhttp.ProblemNotRetained {
		t.Fatalf("retry: problem %s, want %s", pt, idemhttp.ProblemNotRetained)
	}
	if n := ran.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
	if outs := b.outcomes(); len(outs) < 1 || outs[0] != idemhttp.OutcomeOversize {
		t.Fatalf("outcomes %v, want oversize first", outs)
	}
}

// TestMemoryBudgetOption: the budget's default and validation.
func TestMemoryBudgetOption(t *testing.T) {
	t.Parallel()
	eng, err := idem.New(memstore.New(), idem.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		opt  idemhttp.Options
		want int64 // -1: unlimited
	}{
		{idemhttp.Options{Scope: idemhttp.SingleCaller()}, idemhttp.DefaultMemoryBudget},
		{idemhttp.Options{MaxRequestBody: 32 << 20, Scope: idemhttp.SingleCaller()}, 4 * (32<<20 + idemhttp.DefaultMaxResponseBody)},
		{idemhttp.Options{MemoryBudget: 1 << 10, Scope: idemhttp.SingleCaller()}, 1 << 10},
		{idemhttp.Options{MemoryBudget: -1, Scope: idemhttp.SingleCaller()}, -1},
	} {
		tc.opt.Runner = eng
		got, err := idemhttp.MemoryBudgetOf(tc.opt)
		if err != nil || got != tc.want {
			t.Errorf("%+v: budget %d, %v; want %d", tc.opt, got, err, tc.want)
		}
	}
}

// TestMemoryBudgetGivenBackOnPanic: a handler that panics gives its request's memory back,
// whichever way the request reached it: under a claim, without a key (the key source reads the
// body), or failing open. Bytes held for ever would shrink the budget until every request is
// refused.
func TestMemoryBudgetGivenBackOnPanic(t *testing.T) {
	t.Parallel()
	panics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	for _, tc := range []struct {
		name       string
		opt        idemhttp.Options
		closeStore bool
		key        string
	}{
		{"claimed", idemhttp.Options{Scope: idemhttp.SingleCaller()}, false, "k"},
		{"no key in the body", idemhttp.Options{Key: idemhttp.JSONKey("id"), Scope: idemhttp.SingleCaller()}, false, ""},
		{"fail open", idemhttp.Options{FailOpen: true, Scope: idemhttp.SingleCaller()}, true, "k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupBudget(t, tc.opt, panics)
			if tc.closeStore {
				b.store.(interface{ Close() error }).Close()
			}
			for range 3 {
				r := b.do("POST", "/", tc.key, `{"amount":1}`)
				if r.Err == nil && r.Status != 500 {
					t.Fatalf("%d %s, want 500 or a cut connection", r.Status, r.Body)
				}
			}
			b.waitHeld(t, "the memory of the panicked requests to come back", func(n int64) bool { return n == 0 })
		})
	}
}

// TestSharedBudget: two middlewares given one Budget are bounded together: memory held under
// one refuses a request under the other, and InUse comes back to 0.
func TestSharedBudget(t *testing.T) {
	t.Parallel()
	shared := idemhttp.NewBudget(256 << 10)
	if shared.Limit() != 256<<10 || idemhttp.NewBudget(0).Limit() != idemhttp.DefaultMemoryBudget || idemhttp.NewBudget(-1).Limit() >= 0 {
		t.Fatal("NewBudget's limits")
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
	a := setupBudget(t, idemhttp.Options{Budget: shared, Scope: idemhttp.SingleCaller()}, ok)
	b := setupBudget(t, idemhttp.Options{Budget: shared, Scope: idemhttp.SingleCaller()}, ok)
	a.slowConn(t, "holder", 1<<20, bytes.Repeat([]byte("x"), 300<<10))
	a.waitHeld(t, "the holder to hold more than the budget", func(n int64) bool { return n > 256<<10 })
	if r := b.do("POST", "/", "other-route", "{}"); r.Status != http.StatusServiceUnavailable || problemType(t, r) != idemhttp.ProblemOverloaded {
		t.Fatalf("under the other middleware: %d %s, want 503 overloaded", r.Status, r.Body)
	}
	if n := shared.InUse(); n <= 256<<10 {
		t.Fatalf("InUse %d while the holder holds more than the budget", n)
	}
	a.srv.CloseClientConnections()
	b.waitHeld(t, "the shared budget to come back to 0", func(n int64) bool { return n == 0 && shared.InUse() == 0 })
	if _, err := idemhttp.New(idemhttp.Options{Runner: a.eng, Budget: shared, MemoryBudget: 1, Scope: idemhttp.SingleCaller()}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("MemoryBudget and Budget both set: %v, want idem.ErrInvalidInput", err)
	}
}

// A response buffer that grows is charged to the memory budget by what it grows, not by its
// new size and its old one together: a 1 MiB response written in 4 KiB pieces, its buffer
// doubling up to MaxResponseBody, holds 1 MiB of the budget (the request's buffer aside).
func TestResponseGrowthChargedOnce(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	budget := idemhttp.NewBudget(1 << 30)
	var held atomic.Int64
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Budget: budget, MaxResponseBody: size, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := strings.Repeat("g", 4<<10)
		for range size / len(chunk) {
			_, _ = io.WriteString(w, chunk)
		}
		held.Store(budget.InUse())
	}))
	if r := b.do(http.MethodPost, "/", "k", `{}`); r.Status != http.StatusOK || len(r.Body) != size {
		t.Fatalf("got %d, %d bytes", r.Status, len(r.Body))
	}
	if h := held.Load(); h < size || h > size+128<<10 {
		t.Fatalf("%d bytes of the budget held for a %d-byte response, want it and at most 128 KiB more", h, size)
	}
}

// A request buffer that grows is charged to the memory budget by what it grows: a 1 MiB body
// of unknown length (chunked), its buffer doubling from 4 KiB, holds 1 MiB of the budget and
// little more (the response's buffer, up to 64 KiB when pooled, and at most 64 KiB of slack);
// a body of declared length grows its buffer to that length and one byte, no further.
func TestRequestGrowthChargedOnce(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	for _, tc := range []struct {
		name    string
		length  int64 // the request's ContentLength; -1: chunked
		atLeast int64
		atMost  int64
	}{
		{"chunked", -1, size, size + 128<<10},
		{"declared", 300 << 10, 300 << 10, 300<<10 + 128<<10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			budget := idemhttp.NewBudget(1 << 30)
			var held, got atomic.Int64
			b := setup(t, nil, idem.Options{}, idemhttp.Options{Budget: budget, MaxRequestBody: size, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := io.Copy(io.Discard, r.Body)
				got.Store(n)
				held.Store(budget.InUse())
			}))
			body := strings.Repeat("r", size)
			if tc.length > 0 {
				body = body[:tc.length]
			}
			req, err := http.NewRequest(http.MethodPost, b.srv.URL, struct{ io.Reader }{strings.NewReader(body)}) // no length: chunked
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tc.length
			req.Header.Set("Idempotency-Key", "k")
			resp, err := b.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || got.Load() != int64(len(body)) {
				t.Fatalf("got %d, the handler read %d bytes; want 200 and all %d", resp.StatusCode, got.Load(), len(body))
			}
			if h := held.Load(); h < tc.atLeast || h > tc.atMost {
				t.Fatalf("%d bytes of the budget held for a %d-byte body, want %d to %d", h, len(body), tc.atLeast, tc.atMost)
			}
		})
	}
}
