package gateway

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// idemhttpOutcomes reads the idemhttp package's source and returns the value of every
// constant of type Outcome, so that an outcome added there is checked here without a list to
// keep in step.
func idemhttpOutcomes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../idemhttp/*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		{
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, sp := range gd.Specs {
					vs := sp.(*ast.ValueSpec)
					if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Outcome" {
						continue
					}
					for _, v := range vs.Values {
						if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, _ := strconv.Unquote(lit.Value)
							out = append(out, s)
						}
					}
				}
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d idemhttp outcomes: %v", len(out), out)
	}
	return out
}

// scrape returns the gateway's /metrics text, as its metrics listener serves it.
func scrape(t *testing.T, g *Gateway) string {
	t.Helper()
	w := httptest.NewRecorder()
	g.OpsHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", w.Code)
	}
	return w.Body.String()
}

// TestMetricsComplete: /metrics has the Go runtime's and the process's metrics, the build's
// information, a series at 0 for every outcome from the start, and passes promlint.
func TestMetricsComplete(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	g, err := New(context.Background(), Config{Upstream: up.URL, Store: "memory://", Scope: ScopeNone},
		Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: "v9.8.7"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })

	before := scrape(t, g)
	for _, o := range append(idemhttpOutcomes(t), outcomeUpstreamError, outcomeRefused) {
		if want := `idem_requests_total{outcome="` + o + `"} 0`; !strings.Contains(before, want+"\n") {
			t.Errorf("no %s before any request", want)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "process_open_fds"} {
		if !strings.Contains(before, "\n"+name+" ") {
			t.Errorf("no %s", name)
		}
	}
	if want := `idem_build_info{commit="`; !strings.Contains(before, want) {
		t.Errorf("no %s...", want)
	}
	if want := `go_version="` + runtime.Version() + `",version="v9.8.7"} 1`; !strings.Contains(before, want) {
		t.Errorf("idem_build_info has not %s:\n%s", want, grepLines(before, "idem_build_info"))
	}

	for i, key := range []string{"a", "a", ""} {
		r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"n":`+strconv.Itoa(i)+`}`))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		g.ServeHTTP(httptest.NewRecorder(), r)
	}
	problems, err := promlint.New(strings.NewReader(scrape(t, g))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestClaimsInFlight: idem_claims_in_flight counts a processed request while its upstream
// call runs, not a bypassed one, and returns to 0 when it is answered.
func TestClaimsInFlight(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}, 2), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	g, err := New(context.Background(), Config{Upstream: up.URL, Store: "memory://", Scope: ScopeNone},
		Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	gauge := func(name string) string {
		for _, l := range strings.Split(scrape(t, g), "\n") {
			if v, ok := strings.CutPrefix(l, name+" "); ok {
				return v
			}
		}
		return "absent"
	}
	done := make(chan struct{})
	for _, key := range []string{"k", ""} {
		go func() {
			defer func() { done <- struct{}{} }()
			r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{}`))
			if key != "" {
				r.Header.Set("Idempotency-Key", key)
			}
			g.ServeHTTP(httptest.NewRecorder(), r)
		}()
	}
	<-arrived
	<-arrived
	if got := gauge("idem_claims_in_flight"); got != "1" {
		t.Errorf("claims in flight %s with one processed and one bypassed request running, want 1", got)
	}
	if got := gauge("idem_requests_in_flight"); got != "2" {
		t.Errorf("requests in flight %s, want 2", got)
	}
	close(release)
	<-done
	<-done
	if got := gauge("idem_claims_in_flight"); got != "0" {
		t.Errorf("claims in flight %s once answered, want 0", got)
	}
}
