package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/payments"
	"github.com/idemkit/idem/internal/testenv"
)

// binaryDir holds the idem command built for the end-to-end tests; binaryOnce builds it the
// first time a test needs it, so a run of the other tests alone (go test -skip '^TestBinary')
// does not pay for the build.
var (
	binaryDir  string
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// idemBinary returns the path of the idem command built from this tree, building it once.
func idemBinary(t testing.TB) string {
	t.Helper()
	binaryOnce.Do(func() {
		path := filepath.Join(binaryDir, "idem")
		out, err := exec.Command("go", "build", "-o", path, "github.com/idemkit/idem/cmd/idem").CombinedOutput()
		if err != nil {
			binaryErr = fmt.Errorf("building idem: %v\n%s", err, out)
			return
		}
		binaryPath = path
	})
	if binaryErr != nil {
		t.Fatal(binaryErr)
	}
	return binaryPath
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-e2e-")
	if err != nil {
		panic(err)
	}
	binaryDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// gw is a running `idem serve` process.
type gw struct {
	url  string
	cmd  *exec.Cmd
	logs *bytes.Buffer
	mu   *sync.Mutex
	done chan error
}

// testSecret is the scope secret of the tests' gateways.
const testSecret = "0123456789abcdef0123456789abcdef"

// startGateway runs `idem serve` with args on a free loopback port and waits until it is
// ready. It is stopped (SIGKILL) at the end of the test if still running. Unless args make
// a scope decision (--scope, --scope-header), the gateway runs with --scope none: the test is
// its one trusted caller. A --scope-header gets --scope-secret testSecret unless args give one.
func startGateway(t *testing.T, args ...string) *gw {
	t.Helper()
	if !slices.ContainsFunc(args, func(a string) bool { return a == "--scope" || a == "--scope-header" }) {
		args = append(args, "--scope", "none")
	}
	if slices.Contains(args, "--scope-header") && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--scope-secret") }) {
		args = append(args, "--scope-secret", testSecret)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(idemBinary(t), append([]string{"serve", "--listen", addr}, args...)...)
	cmd.Env = append(os.Environ(), "IDEM_CONFIG=")
	logs, mu := &bytes.Buffer{}, &sync.Mutex{}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gw{url: "http://" + addr, cmd: cmd, logs: logs, mu: mu, done: make(chan error, 1)}
	go func() { g.done <- cmd.Wait(); pw.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-g.done
		if t.Failed() {
			t.Logf("gateway %s logs:\n%s", addr, g.log())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(g.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return g
			}
		}
		select {
		case err := <-g.done:
			g.done <- err // for the cleanup, which waits for the exit
			t.Fatalf("gateway exited: %v\n%s", err, g.log())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("gateway not ready after 20s:\n%s", g.log())
	return nil
}

func (g *gw) log() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logs.String()
}

// upstream is a payments API on loopback.
func upstream(t *testing.T) (*payments.API, string) {
	api := payments.New()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return api, srv.URL
}

type answer struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, url, key, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/charges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}
}

const charge = `{"amount":1000,"currency":"eur"}`

func sqliteStore(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "idem.db") }

func TestBinarySeedScenario(t *testing.T) {
	t.Parallel()
	api, up := upstream(t)
	g := startGateway(t, "--upstream", up, "--store", sqliteStore(t))

	first := post(t, g.url, "order-1", charge)
	second := post(t, g.url, "order-1", charge)
	if first.status != 201 || second.status != 201 || first.body != second.body {
		t.Fatalf("first %d %q\nsecond %d %q", first.status, first.body, second.status, second.body)
	}
	if second.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("replay header: first %q second %q", first.header.Get("Idempotent-Replayed"), second.header.Get("Idempotent-Replayed"))
	}
	if first.header.Get("Location") != second.header.Get("Location") {
		t.Error("stored headers differ on replay")
	}
	other := post(t, g.url, "order-1", `{"amount":999,"currency":"eur"}`)
	if other.status != 422 || !strings.Contains(other.header.Get("Content-Type"), "problem+json") {
		t.Fatalf("other body: %d %s", other.status, other.body)
	}
	if api.Count() != 1 {
		t.Fatalf("charges = %d, want 1", api.Count())
	}
	// Without a key the request passes through; GET is not processed.
	if a := post(t, g.url, "", charge); a.status != 201 || api.Count() != 2 {
		t.Fatalf("no key: %d, charges %d", a.status, api.Count())
	}
	resp, err := http.Get(g.url + "/v1/charges")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET: %v", err)
	}
	resp.Body.Close()
	// A bad key is refused before anything runs.
	if a := post(t, g.url, strings.Repeat("k", 256), charge); a.status != 400 || api.Count() != 2 {
		t.Fatalf("bad key: %d, charges %d", a.status, api.Count())
	}
}

// The seed scenario: the connection drops after the server processed the order. The client's
// retry gets the stored response, and the order is charged once.
func TestBinaryClientGivesUp(t *testing.T) {
	t.Parallel()
	api, up := upstream(t)
	api.Delay = 400 * time.Millisecond
	g := startGateway(t, "--upstream", up, "--store", sqliteStore(t), "--wait", "5s")
	c := &http.Client{Timeout: 100 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/charges", strings.NewReader(charge))
	req.Header.Set("Idempotency-Key", "drop-1")
	if _, err := c.Do(req); err == nil {
		t.Fatal("the client was expected to time out")
	}
	// The retry waits for the original (still running upstream) and replays it.
	a := post(t, g.url, "drop-1", charge)
	if a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d %v %s", a.status, a.header, a.body)
	}
	if api.Count() != 1 {
		t.Fatalf("charges = %d, want 1", api.Count())
	}
}

func TestBinaryUpstreamRefusedReleases(t *testing.T) {
	t.Parallel()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	g := startGateway(t, "--upstream", "http://"+addr, "--store", sqliteStore(t))
	if a := post(t, g.url, "refused-1", charge); a.status != 502 {
		t.Fatalf("upstream down: %d %s", a.status, a.body)
	}
	// The upstream comes back: the retry executes, since nothing was sent the first time.
	api := payments.New()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s was taken meanwhile: %v", addr, err)
	}
	srv := &http.Server{Handler: api}
	go srv.Serve(ln)
	defer srv.Close()
	if a := post(t, g.url, "refused-1", charge); a.status != 201 || api.Count() != 1 {
		t.Fatalf("after the upstream came back: %d, charges %d", a.status, api.Count())
	}
}

// An upstream that takes the request and drops the connection without an answer: the
// outcome is uncertain, so the key is held (409) until its lease runs out, never re-executed
// at once.
func TestBinaryUpstreamNoAnswerIsUncertain(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		calls.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	g := startGateway(t, "--upstream", srv.URL, "--store", sqliteStore(t), "--lease", "2s")
	if a := post(t, g.url, "lost-1", charge); a.status != 502 {
		t.Fatalf("no answer: %d %s", a.status, a.body)
	}
	a := post(t, g.url, "lost-1", charge)
	if a.status != 409 || a.header.Get("Retry-After") == "" {
		t.Fatalf("retry within the lease: %d %v %s", a.status, a.header, a.body)
	}
	if calls.Load() != 1 {
		t.Fatalf("upstream called %d times, want 1", calls.Load())
	}
	time.Sleep(2100 * time.Millisecond)
	_ = post(t, g.url, "lost-1", charge)
	if calls.Load() != 2 {
		t.Fatalf("after the lease the retry should take over: %d calls", calls.Load())
	}
}

func TestBinaryGracefulShutdown(t *testing.T) {
	t.Parallel()
	api, up := upstream(t)
	api.Delay = 500 * time.Millisecond
	store := sqliteStore(t)
	g := startGateway(t, "--upstream", up, "--store", store)
	res := make(chan answer, 1)
	go func() { res <- post(t, g.url, "drain-1", charge) }()
	time.Sleep(150 * time.Millisecond)
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	a := <-res
	if a.status != 201 {
		t.Fatalf("in-flight request during shutdown: %d %s", a.status, a.body)
	}
	select {
	case err := <-g.done:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
		g.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("gateway did not exit after SIGTERM")
	}
	// A new gateway on the same store replays the drained request's response.
	g2 := startGateway(t, "--upstream", up, "--store", store)
	if b := post(t, g2.url, "drain-1", charge); b.status != 201 || b.body != a.body || api.Count() != 1 {
		t.Fatalf("after restart: %d %q (charges %d)", b.status, b.body, api.Count())
	}
}

func TestBinaryMetrics(t *testing.T) {
	t.Parallel()
	_, up := upstream(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	maddr := ln.Addr().String()
	ln.Close()
	g := startGateway(t, "--upstream", up, "--store", "memory://", "--metrics-listen", maddr)
	post(t, g.url, "m-1", charge)
	post(t, g.url, "m-1", charge)
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The first replay reads the store (and fills the gateway's cache): two reserves.
	for _, want := range []string{`idem_requests_total{outcome="executed"} 1`, `idem_requests_total{outcome="replay"} 1`, `idem_store_operation_seconds_count{op="reserve",result="ok"} 2`, "idem_upstream_seconds"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// sharedStoreTest runs three gateways on one store and sends 300 concurrent duplicates spread
// over them: the upstream must be called once, and every answer must be the same.
func sharedStoreTest(t *testing.T, store string) {
	var calls atomic.Int32
	api := payments.New()
	api.Delay = 300 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			calls.Add(1)
		}
		api.ServeHTTP(w, r)
	}))
	defer srv.Close()
	var gws []*gw
	for range 3 {
		gws = append(gws, startGateway(t, "--upstream", srv.URL, "--store", store, "--wait", "20s"))
	}
	key := fmt.Sprintf("shared-%d", time.Now().UnixNano())
	var wg sync.WaitGroup
	bodies := make([]string, 300)
	statuses := make([]int, 300)
	tr := &http.Transport{MaxIdleConnsPerHost: 100}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for i := range 300 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, gws[i%3].url+"/v1/charges", strings.NewReader(charge))
			req.Header.Set("Idempotency-Key", key)
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			bodies[i], statuses[i] = string(b), resp.StatusCode
		})
	}
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("upstream called %d times for one key over 3 gateways, want 1", calls.Load())
	}
	for i := range bodies {
		if statuses[i] != 201 || bodies[i] != bodies[0] {
			t.Fatalf("answer %d: %d %q, want 201 %q", i, statuses[i], bodies[i], bodies[0])
		}
	}
}

func TestBinaryThreeGatewaysSQLite(t *testing.T) {
	t.Parallel()
	sharedStoreTest(t, sqliteStore(t))
}

// Two tenants using the same key through --scope-header never see or block each other.
func TestBinaryTenantsAreApart(t *testing.T) {
	t.Parallel()
	api, up := upstream(t)
	g := startGateway(t, "--upstream", up, "--store", sqliteStore(t), "--scope-header", "X-API-Key")
	send := func(tenant, body string) answer {
		req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "same-key")
		req.Header.Set("X-API-Key", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header, string(b)}
	}
	a1 := send("tenant-a", charge)
	b1 := send("tenant-b", `{"amount":5,"currency":"usd"}`) // another payload: no 422 across tenants
	if a1.status != 201 || b1.status != 201 || a1.body == b1.body || api.Count() != 2 {
		t.Fatalf("a %d %s, b %d %s, charges %d", a1.status, a1.body, b1.status, b1.body, api.Count())
	}
	if a2 := send("tenant-a", charge); a2.body != a1.body || a2.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("tenant a's replay: %d %s", a2.status, a2.body)
	}
	if b2 := send("tenant-b", `{"amount":5,"currency":"usd"}`); b2.body != b1.body || api.Count() != 2 {
		t.Fatalf("tenant b's replay: %d %s (charges %d)", b2.status, b2.body, api.Count())
	}
	// The four requests' log lines are written (within the log's flush interval) before the
	// check, so it looks at them.
	for deadline := time.Now().Add(5 * time.Second); strings.Count(g.log(), "msg=request") < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("the four requests' log lines did not appear:\n%s", g.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(g.log(), "tenant-a") {
		t.Error("the scope header's value (a secret) reached the log")
	}
}

// pgStore returns a PostgreSQL store URL with a table of the test's own, dropped when the test
// ends (after its gateways stopped: cleanups run last registered first).
func pgStore(t *testing.T) string {
	u := testenv.PostgresURL(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	table := fmt.Sprintf("gw_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Logf("dropping %s: %v", table, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Logf("dropping %s: %v", table, err)
		}
	})
	return u + sep + "table=" + table
}

// redisStore returns a Redis store URL with a key prefix of the test's own, whose keys are
// deleted when the test ends.
func redisStore(t *testing.T) string {
	addr := testenv.RedisAddr(t)
	prefix := fmt.Sprintf("gw%d:", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Logf("deleting %s*: %v", prefix, err)
		}
	})
	return fmt.Sprintf("redis://%s/0?prefix=%s", addr, prefix)
}

func TestBinaryThreeGatewaysPostgres(t *testing.T) {
	t.Parallel()
	sharedStoreTest(t, pgStore(t))
}

func TestBinaryThreeGatewaysRedis(t *testing.T) {
	t.Parallel()
	sharedStoreTest(t, redisStore(t))
}

// The seed scenario on the network stores, through the binary.
func TestBinarySeedScenarioNetworkStores(t *testing.T) {
	t.Parallel()
	for name, store := range map[string]func(*testing.T) string{"postgres": pgStore, "redis": redisStore} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api, up := upstream(t)
			g := startGateway(t, "--upstream", up, "--store", store(t))
			first, second := post(t, g.url, "order-1", charge), post(t, g.url, "order-1", charge)
			if first.status != 201 || second.status != 201 || first.body != second.body || second.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("first %d %q, second %d %q", first.status, first.body, second.status, second.body)
			}
			if other := post(t, g.url, "order-1", `{"amount":7,"currency":"eur"}`); other.status != 422 || api.Count() != 1 {
				t.Fatalf("other body: %d, charges %d", other.status, api.Count())
			}
		})
	}
}

// TestBinaryH2C: with --h2c, clients may speak HTTP/2 without TLS: 200 concurrent duplicates
// of one key over HTTP/2 still charge once and get identical answers, and HTTP/1.1 clients
// keep working.
func TestBinaryH2C(t *testing.T) {
	t.Parallel()
	api, up := upstream(t)
	api.Delay = 50 * time.Millisecond
	g := startGateway(t, "--upstream", up, "--store", "memory://", "--h2c", "--wait", "10s")
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	const n = 200
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/charges", strings.NewReader(charge))
			req.Header.Set("Idempotency-Key", "h2c-1")
			resp, err := c.Do(req)
			if err != nil {
				t.Errorf("POST over h2c: %v", err)
				return
			}
			defer resp.Body.Close()
			if resp.ProtoMajor != 2 {
				t.Errorf("answered over %s, want HTTP/2", resp.Proto)
			}
			b, _ := io.ReadAll(resp.Body)
			answers[i] = answer{resp.StatusCode, resp.Header, string(b)}
		})
	}
	wg.Wait()
	for i, a := range answers {
		if a.status != 201 || a.body != answers[0].body {
			t.Fatalf("answer %d: %d %q, want 201 %q", i, a.status, a.body, answers[0].body)
		}
	}
	if api.Count() != 1 {
		t.Fatalf("charges = %d, want 1", api.Count())
	}
	if a := post(t, g.url, "h2c-1", charge); a.status != 201 || a.body != answers[0].body || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("HTTP/1.1 retry: %d %q %q", a.status, a.body, a.header.Get("Idempotent-Replayed"))
	}
}
