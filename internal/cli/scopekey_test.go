package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/gateway"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/syncbuf"
)

// runEnv runs the idem command in-process with the environment vars (nothing else of the
// process's) and returns its exit code and output, in buffers that a parallel test's store
// client may still write to (see run).
func runEnv(t *testing.T, vars map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb syncbuf.Buffer
	code := mainEnv(context.Background(), args, &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }})
	return code, out.String(), errb.String()
}

// startServe runs serve in-process with cfg (listening on a free loopback port) until the
// test ends, and returns its address.
func startServe(t *testing.T, cfg gateway.Config, log *slog.Logger) string {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	cfg = cfg.WithDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- serve(ctx, nil, cfg, log, func(s serveAddrs) { addr <- s.addr }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start in 30s")
	}
	return ""
}

// send posts to the gateway with key and, unless tenant is "", the scope header.
func send(t *testing.T, url, tenant, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/charges", strings.NewReader(`{"amount":1}`))
	req.Header.Set("Idempotency-Key", key)
	if tenant != "" {
		req.Header.Set("X-API-Key", tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", key, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestScopeValueFindsGatewayRecords: a request through the gateway with tenant header X and
// key K is found by `idem inspect K --scope-value X` (the HMAC under the scope secret, as the
// gateway computes it), listed by `idem list --scope-value X`, and not by another tenant's
// value, another secret, or no secret at all; a running request's key is not released
// without --force; --scope none finds a request sent without the header.
func TestScopeValueFindsGatewayRecords(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef0123456789abcdef"
	arrived, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "slow-1" {
			once.Do(func() { close(arrived) })
			<-release
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ch_`+r.Header.Get("Idempotency-Key")+`"}`)
	}))
	t.Cleanup(up.Close)
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "idem.db")
	url := startServe(t, gateway.Config{Upstream: up.URL, Store: store, ScopeHeader: "X-API-Key", ScopeSecret: secret}, nil)
	t.Cleanup(func() { released.Do(func() { close(release) }) }) // before the gateway's drain
	for _, r := range []struct{ tenant, key string }{{"tenant-a", "order-1"}, {"tenant-a", "order-2"}, {"tenant-b", "order-1"}, {"", "anon-1"}} {
		if code, body := send(t, url, r.tenant, r.key); code != 201 {
			t.Fatalf("POST %v: %d %s", r, code, body)
		}
	}
	slow := make(chan int, 1)
	go func() { code, _ := send(t, url, "tenant-a", "slow-1"); slow <- code }()
	<-arrived

	vars := map[string]string{"IDEM_STORE": store, "IDEM_SCOPE_SECRET": secret}
	scopeA := idemhttp.KeyedHashScope([]byte(secret), "tenant-a")

	// Human output, flags after the key.
	code, out, errs := runEnv(t, vars, "inspect", "order-1", "--scope-value", "tenant-a", "--body")
	if code != 0 || !strings.Contains(out, "completed") || !strings.Contains(out, "client key   order-1") ||
		!strings.Contains(out, "scope        "+scopeA) || !strings.Contains(out, `{"id":"ch_order-1"}`) {
		t.Fatalf("inspect order-1 --scope-value tenant-a: %d\n%s%s", code, out, errs)
	}
	// JSON, flags before the key; the secret from a file.
	file := filepath.Join(dir, "secret")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runEnv(t, map[string]string{"IDEM_STORE": store}, "inspect", "--json", "--scope-secret-file", file, "--scope-value", "tenant-a", "order-1")
	var in inspection
	if err := json.Unmarshal([]byte(out), &in); code != 0 || err != nil {
		t.Fatalf("inspect --json: %d %v\n%s%s", code, err, out, errs)
	}
	if in.Key != scopeA+"|order-1" || in.Scope == nil || *in.Scope != scopeA || in.ClientKey != "order-1" || in.Condition != "completed" || in.Status != 201 {
		t.Errorf("inspect --json = %+v", in)
	}
	// Another tenant's value, another secret: not this record.
	if code, out, errs = runEnv(t, vars, "inspect", "order-2", "--scope-value", "tenant-b"); code != 1 || !strings.Contains(errs, "no record") {
		t.Errorf("tenant-b's order-2: %d %s%s", code, out, errs)
	}
	other := map[string]string{"IDEM_STORE": store, "IDEM_SCOPE_SECRET": "another-secret-of-16-bytes"}
	if code, _, errs = runEnv(t, other, "inspect", "order-1", "--scope-value", "tenant-a"); code != 1 || !strings.Contains(errs, "scope secret is not the gateway's") {
		t.Errorf("another secret: %d %s", code, errs)
	}
	// No secret: a clear refusal, not an unkeyed hash.
	code, _, errs = runEnv(t, map[string]string{"IDEM_STORE": store}, "inspect", "order-1", "--scope-value", "tenant-a")
	if code != 2 || !strings.Contains(errs, "scope secret") || !strings.Contains(errs, "IDEM_SCOPE_SECRET") {
		t.Errorf("--scope-value without a secret: %d %s", code, errs)
	}
	if code, _, errs = runEnv(t, vars, "inspect", "order-1", "--scope-value", "tenant-a", "--scope", "none"); code != 2 {
		t.Errorf("--scope none with --scope-value: %d %s", code, errs)
	}
	// --scope none: the request sent without the header.
	if code, out, errs = runEnv(t, vars, "inspect", "anon-1", "--scope", "none", "--json"); code != 0 || !strings.Contains(out, `"key": "|anon-1"`) {
		t.Errorf("--scope none: %d %s%s", code, out, errs)
	}
	// The storage key itself, as today.
	if code, out, errs = runEnv(t, vars, "inspect", scopeA+"|order-2"); code != 0 || !strings.Contains(out, "completed") {
		t.Errorf("storage key: %d %s%s", code, out, errs)
	}

	// list: the tenant's records only; --key is then the client key's start.
	listKeys := func(args ...string) []string {
		t.Helper()
		code, out, errs := runEnv(t, vars, append([]string{"list", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("list %v: %d %s", args, code, errs)
		}
		var keys []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var r listed
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("list %v: line %q: %v", args, line, err)
			}
			keys = append(keys, r.ClientKey+"="+r.Condition)
		}
		return keys
	}
	if got := strings.Join(listKeys("--scope-value", "tenant-a"), " "); got != "order-1=completed order-2=completed slow-1=running" {
		t.Errorf("list --scope-value tenant-a: %s", got)
	}
	if got := strings.Join(listKeys("--scope-value", "tenant-a", "--key", "slow"), " "); got != "slow-1=running" {
		t.Errorf("list --scope-value tenant-a --key slow: %s", got)
	}
	if got := strings.Join(listKeys("--state", "running", "--scope-value", "tenant-b"), " "); got != "" {
		t.Errorf("list --scope-value tenant-b --state running: %s", got)
	}
	if got := strings.Join(listKeys("--scope", "none"), " "); got != "anon-1=completed" {
		t.Errorf("list --scope none: %s", got)
	}
	if code, _, errs := runEnv(t, map[string]string{"IDEM_STORE": store}, "list", "--scope-value", "tenant-a"); code != 2 || !strings.Contains(errs, "scope secret") {
		t.Errorf("list --scope-value without a secret: %d %s", code, errs)
	}

	// release: a running request's key is refused, in JSON too; the request then completes.
	code, out, errs = runEnv(t, vars, "release", "slow-1", "--scope-value", "tenant-a", "--json")
	var rel releaseResult
	if err := json.Unmarshal([]byte(out), &rel); code != 1 || err != nil || rel.Action != "refused" || rel.Condition != "running" || !strings.Contains(errs, "--force") {
		t.Errorf("release of a running key: %d %+v %v %s", code, rel, err, errs)
	}
	released.Do(func() { close(release) })
	if c := <-slow; c != 201 {
		t.Errorf("the slow request: %d", c)
	}
	code, out, errs = runEnv(t, vars, "release", "--scope-value", "tenant-a", "--json", "slow-1")
	if err := json.Unmarshal([]byte(out), &rel); code != 1 || err != nil || rel.Action != "refused" || rel.Condition != "completed" {
		t.Errorf("release of a completed key: %d %+v %v %s", code, rel, err, errs)
	}
}
