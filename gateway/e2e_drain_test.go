package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/gateway"
)

// TestBinaryReadyzDrains: from the first SIGTERM, /readyz answers 503 on the metrics listener
// (so a load balancer stops sending requests) while a request in flight is still being
// answered; that request still completes with the upstream's answer, and the gateway exits 0.
func TestBinaryReadyzDrains(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(arrived) })
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ch_drain"}`)
	}))
	t.Cleanup(up.Close)
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	maddr := ln.Addr().String()
	ln.Close()
	g := startGateway(t, "--upstream", up.URL, "--store", "memory://", "--metrics-listen", maddr, "--shutdown-timeout", "30s")
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + maddr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) { // the metrics listener opens after the gateway's
		code, body := readyz()
		if code == http.StatusOK {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("/readyz before shutdown: %d %s", code, body)
		}
	}
	res := make(chan answer, 1)
	go func() { res <- post(t, g.url, "drain-ready", charge) }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := readyz()
		if code == http.StatusServiceUnavailable && strings.Contains(body, "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz 5s after SIGTERM, while a request is in flight: %d %q, want 503 draining", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case a := <-res:
		t.Fatalf("the request finished before its upstream answered: %d %s", a.status, a.body)
	case err := <-g.done:
		t.Fatalf("the gateway exited with a request in flight: %v", err)
	default:
	}
	// Still draining a moment later: not a transient answer.
	time.Sleep(100 * time.Millisecond)
	if code, _ := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while draining: %d, want 503", code)
	}
	released.Do(func() { close(release) })
	a := <-res
	if a.status != http.StatusCreated || a.body != `{"id":"ch_drain"}` {
		t.Fatalf("the in-flight request during the drain: %d %q", a.status, a.body)
	}
	select {
	case err := <-g.done:
		if err != nil {
			t.Fatalf("exit after the drain: %v\n%s", err, g.log())
		}
		g.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not exit after the drain")
	}
}

// TestReadyDrain: Drain turns Ready into ErrDraining and /readyz into 503 on both handlers,
// while requests are still served.
func TestReadyDrain(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	t.Cleanup(up.Close)
	g, err := gateway.New(context.Background(), gateway.Config{Upstream: up.URL, Store: "memory://", Scope: "none"}, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	get := func(h http.Handler, method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("Idempotency-Key", "k-"+path)
		h.ServeHTTP(w, r)
		return w
	}
	if err := g.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.Drain()
	if err := g.Ready(context.Background()); !errors.Is(err, gateway.ErrDraining) {
		t.Fatalf("Ready after Drain: %v, want ErrDraining", err)
	}
	for name, h := range map[string]http.Handler{"gateway": g, "admin": g.OpsHandler()} {
		if w := get(h, "GET", "/readyz"); w.Code != http.StatusServiceUnavailable || w.Body.String() != "draining\n" {
			t.Errorf("%s /readyz after Drain: %d %q", name, w.Code, w.Body)
		}
		if w := get(h, "GET", "/healthz"); w.Code != http.StatusOK {
			t.Errorf("%s /healthz after Drain: %d", name, w.Code)
		}
	}
	if w := get(g, "POST", "/v1/charges"); w.Code != http.StatusCreated {
		t.Errorf("a request while draining: %d, want it served", w.Code)
	}
}

// slowUpstream answers 201 after d; it counts the requests that reached it (the effects) and
// signals each arrival.
func slowUpstream(t *testing.T, d time.Duration) (effects *atomic.Int64, arrived chan time.Time, url string) {
	effects, arrived = new(atomic.Int64), make(chan time.Time, 16)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := effects.Add(1)
		arrived <- time.Now()
		time.Sleep(d)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"effect":%d}`, n)
	}))
	t.Cleanup(up.Close)
	return effects, arrived, up.URL
}

// postAsync is post for another goroutine than the test's: an error is an answer with
// status 0 and the error as its body.
func postAsync(url, key, body string) answer {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/charges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

// waitExit waits for g to exit and returns its exit code.
func waitExit(t *testing.T, g *gw, within time.Duration) int {
	t.Helper()
	select {
	case err := <-g.done:
		g.done <- err
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("gateway: %v", err)
		}
		return code
	case <-time.After(within):
		t.Fatalf("the gateway did not exit within %s after the signal\n%s", within, g.log())
		return -1
	}
}

// deployRun is a rolling deploy under --uncertain policy: an upstream call of 3s, a lease of
// 1s and a drain of 500ms, so the drain ends and the process exits while the call runs and
// long before it ends. The client got 503 shutting-down; a new gateway on the same store
// answers every retry 409 for as long as the call may run (its deadline, 4s after it began),
// and the upstream sees one effect. Before the fix, the claim lapsed a lease after the exit
// and the retry ran the effect a second time.
func deployRun(t *testing.T, store, policy string) { deployRunKilled(t, store, policy, false) }

// deployRunKilled is deployRun; with killed, the process gets SIGKILL 300ms after SIGTERM, in
// the middle of its drain, as a pod whose grace period ends does: the claim still holds.
func deployRunKilled(t *testing.T, store, policy string, killed bool) {
	effects, arrived, up := slowUpstream(t, 3*time.Second)
	args := []string{"--upstream", up, "--store", store, "--uncertain", policy, "--lease", "1s",
		"--upstream-timeout", "4s", "--shutdown-timeout", "500ms"}
	g := startGateway(t, args...)
	res := make(chan answer, 1)
	go func() { res <- postAsync(g.url, "deploy-"+policy, charge) }()
	var began time.Time
	select {
	case began = <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	time.Sleep(300 * time.Millisecond)
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if killed {
		time.Sleep(300 * time.Millisecond)
		_ = g.cmd.Process.Kill()
		waitExit(t, g, 10*time.Second)
		<-res // the connection is cut without an answer
	} else {
		if code := waitExit(t, g, 10*time.Second); code != 0 {
			t.Fatalf("exit code %d after a drain that ran out of time, want 0", code)
		}
		a := <-res
		if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "shutting-down") {
			t.Fatalf("the request cut by the drain: %d %s, want 503 shutting-down", a.status, a.body)
		}
	}
	g2 := startGateway(t, args...)
	// Retry until the call's deadline has passed (and its effect has ended): never a second run.
	retries := 0
	for time.Since(began) < 4500*time.Millisecond {
		b := post(t, g2.url, "deploy-"+policy, charge)
		retries++
		if b.status != http.StatusConflict {
			t.Fatalf("retry %d, %s after the call began: %d %s, want 409 while the call may run (effects %d)",
				retries, time.Since(began).Round(time.Millisecond), b.status, b.body, effects.Load())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := effects.Load(); n != 1 || retries == 0 {
		t.Fatalf("%d effects after %d retries, want 1", n, retries)
	}
	if policy == "hold" {
		// Held as an uncertain outcome: still in flight well past the lease, until released.
		if b := post(t, g2.url, "deploy-"+policy, charge); b.status != http.StatusConflict || effects.Load() != 1 {
			t.Fatalf("hold, after the call's deadline: %d %s (effects %d), want 409", b.status, b.body, effects.Load())
		}
	}
}

// TestBinaryDeployNeverTwice: a deploy whose drain ends before an upstream call does never
// runs that effect twice, under each --uncertain policy, on SQLite and PostgreSQL, nor when
// the process is killed mid-drain.
func TestBinaryDeployNeverTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("deploy runs take ~10s each")
	}
	t.Parallel()
	for _, policy := range []string{"hold", "expire", "release"} {
		t.Run("sqlite/"+policy, func(t *testing.T) {
			t.Parallel()
			deployRun(t, sqliteStore(t), policy)
		})
	}
	t.Run("sqlite/hold/killed", func(t *testing.T) {
		t.Parallel()
		deployRunKilled(t, sqliteStore(t), "hold", true)
	})
	t.Run("postgres/hold", func(t *testing.T) {
		t.Parallel()
		deployRun(t, pgStore(t), "hold")
	})
}

// TestBinaryDeployDefaults: with the default shutdown timeout (upstream-timeout + 5s), a drain
// waits for an upstream call slower than the old 30s default would have allowed relative to
// its timeout: the client gets its answer, and a retry after the restart replays it.
func TestBinaryDeployDefaults(t *testing.T) {
	if testing.Short() {
		t.Skip("a deploy run takes ~5s")
	}
	t.Parallel()
	effects, arrived, up := slowUpstream(t, 2*time.Second)
	store := sqliteStore(t)
	args := []string{"--upstream", up, "--store", store, "--lease", "1s", "--upstream-timeout", "3s"}
	g := startGateway(t, args...)
	if strings.Contains(g.log(), "shutdown-timeout is shorter") {
		t.Fatalf("a startup warning with the default shutdown timeout:\n%s", g.log())
	}
	res := make(chan answer, 1)
	go func() { res <- postAsync(g.url, "deploy-defaults", charge) }()
	<-arrived
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	a := <-res
	if a.status != http.StatusCreated {
		t.Fatalf("the request in flight during the drain: %d %s, want its answer", a.status, a.body)
	}
	if code := waitExit(t, g, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	g2 := startGateway(t, args...)
	if b := post(t, g2.url, "deploy-defaults", charge); b.status != http.StatusCreated || b.body != a.body || effects.Load() != 1 {
		t.Fatalf("retry after the restart: %d %q (effects %d), want the replay", b.status, b.body, effects.Load())
	}
	// A shutdown timeout below the upstream timeout is said at startup.
	g3 := startGateway(t, "--upstream", up, "--store", "memory://", "--upstream-timeout", "3s", "--shutdown-timeout", "1s")
	for start := time.Now(); !strings.Contains(g3.log(), "shutdown-timeout is shorter than upstream-timeout"); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("no startup warning for a shutdown timeout below the upstream timeout:\n%s", g3.log())
		}
	}
}

// TestBinarySecondSignal: a second SIGTERM during the drain ends the upstream calls still out
// at once (503 shutting-down, the key held per --uncertain) and exits 1; a retry after the
// restart never runs the effect again while it may run.
func TestBinarySecondSignal(t *testing.T) {
	if testing.Short() {
		t.Skip("takes ~6s")
	}
	t.Parallel()
	effects, arrived, up := slowUpstream(t, 3*time.Second)
	store := sqliteStore(t)
	args := []string{"--upstream", up, "--store", store, "--uncertain", "hold", "--lease", "1s", "--upstream-timeout", "4s"}
	g := startGateway(t, args...)
	res := make(chan answer, 1)
	go func() { res <- postAsync(g.url, "second-signal", charge) }()
	began := <-arrived
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond)
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	if code := waitExit(t, g, 5*time.Second); code != 1 {
		t.Fatalf("exit code %d after a second signal, want 1", code)
	}
	if time.Since(began) > 2500*time.Millisecond {
		t.Fatalf("exited %s after the call began: the second signal did not end the drain at once", time.Since(began))
	}
	if a := <-res; a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, "shutting-down") {
		t.Fatalf("the request in flight at the second signal: %d %s, want 503 shutting-down", a.status, a.body)
	}
	g2 := startGateway(t, args...)
	for time.Since(began) < 4500*time.Millisecond {
		if b := post(t, g2.url, "second-signal", charge); b.status != http.StatusConflict {
			t.Fatalf("retry after the restart: %d %s (effects %d), want 409", b.status, b.body, effects.Load())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// TestBinaryShutdownDelay: during --shutdown-delay, /readyz answers 503 at once while the
// listener still serves new requests; then the drain runs and the gateway exits 0.
func TestBinaryShutdownDelay(t *testing.T) {
	t.Parallel()
	api, up := upstream(t)
	g := startGateway(t, "--upstream", up, "--store", "memory://", "--shutdown-delay", "1500ms")
	signalled := time.Now()
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	for {
		resp, err := http.Get(g.url + "/readyz")
		if err != nil {
			t.Fatalf("/readyz during the delay: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if time.Since(signalled) > time.Second {
			t.Fatalf("/readyz %s after SIGTERM: %d, want 503", time.Since(signalled), resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a := post(t, g.url, "during-delay", charge); a.status != http.StatusCreated || api.Count() != 1 {
		t.Fatalf("a new request during the shutdown delay: %d %s, want it served", a.status, a.body)
	}
	if code := waitExit(t, g, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if d := time.Since(signalled); d < 1400*time.Millisecond {
		t.Fatalf("exited %s after SIGTERM, before the 1.5s delay", d)
	}
}
