package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/idemkit/idem/store/memstore"
)

// dashboardPath is the Grafana dashboard shipped for the gateway.
const dashboardPath = "../deploy/grafana/idem-gateway.json"

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	labelValues  = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
)

// promMetrics returns the metric names a PromQL expression selects: the identifiers left once
// strings, label matchers, ranges and grouping clauses are removed, other than function calls.
func promMetrics(expr string) []string {
	e := promString.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	var names []string
	for _, m := range promIdent.FindAllStringSubmatch(e, -1) {
		if m[1] != "" { // a function
			continue
		}
		switch m[0] {
		case "and", "or", "unless", "on", "ignoring", "group_left", "group_right", "offset", "bool":
			continue
		}
		names = append(names, m[0])
	}
	return names
}

// dashboardMetrics walks the dashboard's panels (rows' panels included) and variables and
// returns every metric name their queries use, with where it is used.
func dashboardMetrics(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var d struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	used := map[string]string{}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, r := range ps {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatal(err)
			}
			for _, tg := range p.Targets {
				names := promMetrics(tg.Expr)
				if len(names) == 0 {
					t.Errorf("panel %q: no metric in %q", p.Title, tg.Expr)
				}
				for _, n := range names {
					used[n] = "panel " + p.Title
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		for _, m := range labelValues.FindAllStringSubmatch(v.Definition, -1) {
			used[m[1]] = "variable " + v.Name
		}
	}
	return used
}

func TestPromMetrics(t *testing.T) {
	got := promMetrics(`histogram_quantile(0.99, sum by (le, op) (rate(idem_x_bucket{job=~"a{b}",op="by (x)"}[5m]))) / on (op) idem_y`)
	if strings.Join(got, ",") != "idem_x_bucket,idem_y" {
		t.Fatalf("got %v", got)
	}
}

// TestDashboardMetricsExported: every metric the Grafana dashboard queries is on the
// gateway's /metrics once it has served a few requests.
func TestDashboardMetricsExported(t *testing.T) {
	t.Parallel()
	used := dashboardMetrics(t)
	if len(used) < 5 {
		t.Fatalf("only %d metrics found in the dashboard: %v", len(used), used)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	g, err := New(context.Background(), Config{Upstream: up.URL, Scope: ScopeNone},
		Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	for _, body := range []string{`{"a":1}`, `{"a":1}`, `{"a":2}`} {
		r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", "k")
		g.ServeHTTP(httptest.NewRecorder(), r)
	}
	exported := map[string]bool{}
	for _, line := range strings.Split(scrape(t, g), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		exported[line[:strings.IndexAny(line, "{ ")]] = true
	}
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !exported[n] {
			t.Errorf("%s (%s) is not exported by the gateway", n, used[n])
		}
	}
}
