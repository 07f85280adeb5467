package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/syncbuf"
)

// TestDemoAsTheReadmeSays runs `idem demo` as the README's first command does (on free ports)
// and follows the README's tour with what it prints: every line the README shows of its
// output and of its curl pair is a line it prints (addresses, paths and secrets aside); the
// curl pair charges once and replays; the console answers with the record on its first page;
// /metrics answers with the gateway's counters; and the inspect command it prints, run as
// printed, shows the demo's record, completed, and the list command lists it.
func TestDemoAsTheReadmeSays(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	args := readmeDemoArgs(t, string(readme))
	args = append(args, "--listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--delay", "0s")

	out, logs := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	e := &env{stdout: out, stderr: logs, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runDemo(ctx, e, args[1:]) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo: %v", err)
		}
	})
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(out.String(), "Press Ctrl-C"); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("demo ended: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo printed no instructions in 60s:\n%s\n%s", out.String(), logs.String())
		}
	}
	printed := out.String()

	// What the README shows of the output, and its curl pair, is what the demo prints.
	have := map[string]bool{}
	for _, l := range strings.Split(printed, "\n") {
		have[normalizeDemo(l)] = true
	}
	shown := readmeTourLines(t, string(readme))
	for _, l := range shown {
		if !have[normalizeDemo(l)] {
			t.Errorf("the README shows %q, which the demo does not print; it printed:\n%s", l, printed)
		}
	}

	// The curl pair: one charge, the second answer a replay.
	curl := regexp.MustCompile(`(?m)^\s*curl -i (\S+) -H '([^:]+): ([^']+)' -H '([^:]+): ([^']+)' -d '([^']+)'$`).FindStringSubmatch(printed)
	if curl == nil {
		t.Fatalf("no curl pair in:\n%s", printed)
	}
	for i := range 2 {
		req, _ := http.NewRequest("POST", curl[1], strings.NewReader(curl[6]))
		req.Header.Set(curl[2], curl[3])
		req.Header.Set(curl[4], curl[5])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || (resp.Header.Get("Idempotent-Replayed") == "true") != (i == 1) {
			t.Fatalf("curl %d: %d, replayed %q", i+1, resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
		}
	}

	// The console, with the printed token, lists the record on its first page.
	con := regexp.MustCompile(`operator's console:\s+(http://\S+)\s+\(token: ([0-9a-f]+)\)`).FindStringSubmatch(printed)
	if con == nil {
		t.Fatalf("no console address and token in:\n%s", printed)
	}
	if code, body := demoGet(t, con[1], con[2]); code != http.StatusOK || !strings.Contains(body, "order-1001") {
		t.Errorf("console: %d, order-1001 listed: %t", code, strings.Contains(body, "order-1001"))
	}
	if code, _ := demoGet(t, con[1], ""); code != http.StatusUnauthorized {
		t.Errorf("console without the token: %d, want 401", code)
	}
	metrics := regexp.MustCompile(`Prometheus metrics:\s+(http://\S+/metrics)`).FindStringSubmatch(printed)
	if metrics == nil {
		t.Fatalf("no metrics address in:\n%s", printed)
	}
	if code, body := demoGet(t, metrics[1], ""); code != http.StatusOK || !strings.Contains(body, "idem_requests_total") {
		t.Errorf("/metrics: %d, idem_requests_total in it: %t", code, strings.Contains(body, "idem_requests_total"))
	}

	// The operator's commands, run as printed.
	for _, want := range []struct{ cmd, shows string }{
		{"inspect", "status       201"},
		{"list", "order-1001"},
	} {
		m := regexp.MustCompile(`(?m)^\s*(IDEM_SCOPE_SECRET)=(\S+) idem (` + want.cmd + ` .*)$`).FindStringSubmatch(printed)
		if m == nil {
			t.Fatalf("no %s command in:\n%s", want.cmd, printed)
		}
		code, stdout, stderr := runEnv(t, map[string]string{m[1]: m[2]}, strings.Fields(m[3])...)
		if code != 0 || !strings.Contains(stdout, want.shows) || !strings.Contains(stdout, "order-1001") {
			t.Errorf("%s as printed: exit %d, want %q in:\n%s%s", want.cmd, code, want.shows, stdout, stderr)
		}
	}
}

// readmeDemoArgs returns the README's demo command's arguments, from "demo" on.
func readmeDemoArgs(t *testing.T, readme string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go run \./cmd/idem (demo[^#\n]*)`).FindStringSubmatch(readme)
	if m == nil {
		t.Fatal("the README shows no `go run ./cmd/idem demo` command")
	}
	return strings.Fields(m[1])
}

// readmeTourLines returns the lines of the README's 30-second tour that the demo prints: its
// text blocks, and the curl -i lines of its shell blocks.
func readmeTourLines(t *testing.T, readme string) []string {
	t.Helper()
	start := strings.Index(readme, "## 30-second tour")
	if start < 0 {
		t.Fatal("no 30-second tour in the README")
	}
	tour := readme[start:]
	if end := strings.Index(tour[3:], "\n## "); end >= 0 {
		tour = tour[:end+3]
	}
	var lines []string
	lang := ""
	for _, l := range strings.Split(tour, "\n") {
		if strings.HasPrefix(l, "```") {
			lang = strings.TrimPrefix(l, "```")
			continue
		}
		if lang == "text" || lang == "sh" && strings.HasPrefix(l, "curl -i ") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 6 {
		t.Fatalf("found %d demo lines in the README's tour; the scan is broken", len(lines))
	}
	return lines
}

// normalizeDemo blanks what changes from run to run in a line the demo prints: ports, the
// store's path, the console's token and the scope secret.
func normalizeDemo(l string) string {
	for _, r := range []struct{ re, with string }{
		{`127\.0\.0\.1:\d+`, "127.0.0.1:PORT"},
		{`sqlite:///\S*idem\.db`, "sqlite://PATH"},
		{`\(token: [0-9a-f…]+\)`, "(token: TOKEN)"},
		{`IDEM_SCOPE_SECRET=[0-9a-f…]+`, "IDEM_SCOPE_SECRET=SECRET"},
	} {
		l = regexp.MustCompile(r.re).ReplaceAllString(l, r.with)
	}
	return strings.TrimSpace(l)
}

// demoGet GETs url, with the token as a bearer token unless it is "".
func demoGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
