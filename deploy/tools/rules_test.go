package tools

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/idemkit/idem/gateway"
)

const (
	rulesFile     = "../prometheus/idem-alerts.yaml"
	rulesTestFile = "../prometheus/idem-alerts_test.yaml"
	runbookFile   = "../../docs/runbook.md"
	runbookURL    = "https://github.com/idemkit/idem/blob/main/docs/runbook.md#"
)

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func readRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("no rules")
	}
	return out
}

// scrape returns the /metrics text of a gateway started as idem serve starts it (on a memory
// store), so the rules are checked against what the gateway really exports.
func scrape(t *testing.T) string {
	t.Helper()
	cfg := gateway.Config{Upstream: "http://127.0.0.1:1", Store: "memory://", Scope: gateway.ScopeNone}.WithDefaults()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := gateway.New(ctx, cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g.OpsHandler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

var (
	metricName = regexp.MustCompile(`\bidem_[a-z_]+\b`)
	matcher    = regexp.MustCompile(`\b(outcome|op|result)\s*(=~|!=|=)\s*"([^"]*)"`)
)

// TestAlertRulesUseRealMetrics checks every metric name and every label value an alert's
// expression names against the /metrics output of a running gateway: a renamed metric or
// outcome would leave an alert that never fires.
func TestAlertRulesUseRealMetrics(t *testing.T) {
	t.Parallel()
	exported := scrape(t)
	names := map[string]bool{}
	for _, line := range strings.Split(exported, "\n") {
		if strings.HasPrefix(line, "idem_") {
			names[line[:strings.IndexAny(line, "{ ")]] = true
		}
	}
	for _, r := range readRules(t) {
		for _, n := range metricName.FindAllString(r.Expr, -1) {
			if !names[n] {
				t.Errorf("%s: metric %s is not exported by the gateway", r.Alert, n)
			}
		}
		for _, m := range matcher.FindAllStringSubmatch(r.Expr, -1) {
			for _, v := range strings.Split(m[3], "|") {
				if !strings.Contains(exported, m[1]+`="`+v+`"`) {
					t.Errorf("%s: %s=%q is no label value the gateway exports", r.Alert, m[1], v)
				}
			}
		}
	}
}

// slug is GitHub's anchor for a Markdown heading.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// TestAlertRunbookLinks checks that every alert has a summary, a description and a runbook
// link to a section of docs/runbook.md that says what to run.
func TestAlertRunbookLinks(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{} // anchor → the section's text
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			cur = slug(strings.TrimPrefix(line, "## "))
			sections[cur] = ""
			continue
		}
		if cur != "" {
			sections[cur] += line + "\n"
		}
	}
	for _, r := range readRules(t) {
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: no summary or description", r.Alert)
		}
		if r.Labels["severity"] == "" {
			t.Errorf("%s: no severity label", r.Alert)
		}
		u := r.Annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(u, runbookURL)
		if !ok {
			t.Errorf("%s: runbook_url %q is not a section of %s", r.Alert, u, runbookURL)
			continue
		}
		text, ok := sections[anchor]
		if !ok {
			t.Errorf("%s: docs/runbook.md has no section #%s", r.Alert, anchor)
			continue
		}
		if !strings.Contains(text, "idem ") && !strings.Contains(text, "console") {
			t.Errorf("%s: section #%s does not say what to run", r.Alert, anchor)
		}
		if !strings.Contains(text, r.Alert) {
			t.Errorf("%s: section #%s does not name the alert", r.Alert, anchor)
		}
	}
}

// TestAlertRulesPromtool runs promtool check rules and promtool test rules, and checks that
// every alert has a test that expects it to fire and a series that must not fire it.
func TestAlertRulesPromtool(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			InputSeries []struct {
				Series string `json:"series"`
			} `json:"input_series"`
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []struct {
					ExpLabels map[string]string `json:"exp_labels"`
				} `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	job := regexp.MustCompile(`job="([^"]+)"`)
	for _, tc := range tests.Tests {
		var jobs []string
		for _, s := range tc.InputSeries {
			if m := job.FindStringSubmatch(s.Series); m != nil && !slices.Contains(jobs, m[1]) {
				jobs = append(jobs, m[1])
			}
		}
		for _, a := range tc.AlertRuleTest {
			firing := map[string]bool{}
			for _, e := range a.ExpAlerts {
				firing[e.ExpLabels["job"]] = true
			}
			fires[a.Alertname] = fires[a.Alertname] || len(firing) > 0
			for _, j := range jobs {
				quiet[a.Alertname] = quiet[a.Alertname] || !firing[j]
			}
		}
	}
	for _, r := range readRules(t) {
		if !fires[r.Alert] {
			t.Errorf("%s: no test case where it fires", r.Alert)
		}
		if !quiet[r.Alert] {
			t.Errorf("%s: no test case where it must not fire", r.Alert)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
			t.Fatal("promtool is not installed (scripts/deploy-tools.sh installs it)")
		}
		t.Skip("promtool is not installed (scripts/deploy-tools.sh installs it)")
	}
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
