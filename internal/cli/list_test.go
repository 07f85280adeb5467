package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
)

func TestList(t *testing.T) {
	t.Parallel()
	store := seed(t) // done, stuck, stale, held (now); old (3h ago, expired)
	keys := func(out string) []string {
		var ks []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			ks = append(ks, strings.Fields(line)[0])
		}
		return ks
	}
	code, out, errs := run(t, "list", "--store", store)
	if code != 0 || errs != "" {
		t.Fatalf("list: %d %q %q", code, out, errs)
	}
	if got := strings.Join(keys(out), " "); got != "done held old stale stuck" {
		t.Errorf("list keys = %q, want every record in key order\n%s", got, out)
	}
	for _, want := range []string{"KEY", "LEASE LEFT", "STATUS", "ROUTE", "completed", "held", "running", "stale", "expired", "201"} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}

	for _, line := range strings.Split(out, "\n") {
		switch f := strings.Fields(line); {
		case len(f) > 0 && f[0] == "done" && !strings.HasSuffix(line, "  POST /v1/charges"):
			t.Errorf("the route is not the last column of done's line: %q", line)
		case len(f) > 0 && f[0] == "stuck" && f[len(f)-1] != "-":
			t.Errorf("a record without a route does not show -: %q", line)
		}
	}

	// Filters, flags after an argument-less command and in any order.
	code, out, _ = run(t, "list", "--state", "stuck", "--store", store)
	if got := strings.Join(keys(out), " "); code != 0 || got != "held stale" {
		t.Errorf("--state stuck: %d %q", code, got)
	}
	code, out, _ = run(t, "list", "--store", store, "--older-than", "90m")
	if got := strings.Join(keys(out), " "); code != 0 || got != "old" {
		t.Errorf("--older-than 90m: %d %q", code, got)
	}
	code, out, _ = run(t, "list", "--store", store, "--key", "st")
	if got := strings.Join(keys(out), " "); code != 0 || got != "stale stuck" {
		t.Errorf("--key st: %d %q", code, got)
	}

	// --limit stops early and says how to resume; the cursor resumes after the last shown.
	code, out, errs = run(t, "list", "--store", store, "--limit", "2")
	if got := strings.Join(keys(out), " "); code != 0 || got != "done held" || !strings.Contains(errs, "--cursor ") {
		t.Fatalf("--limit 2: %d %q %q", code, got, errs)
	}
	cursor := strings.TrimSpace(errs[strings.Index(errs, "--cursor ")+len("--cursor "):])
	code, out, errs = run(t, "list", "--store", store, "--cursor", cursor)
	if got := strings.Join(keys(out), " "); code != 0 || got != "old stale stuck" || errs != "" {
		t.Errorf("--cursor: %d %q %q", code, got, errs)
	}

	// JSON lines.
	// A completed record past its expiry is expired: --state completed and expired split them.
	code, out, _ = run(t, "list", "--json", "--store", store, "--state", "completed")
	code2, out2, _ := run(t, "list", "--json", "--store", store, "--state", "expired")
	if code != 0 || code2 != 0 {
		t.Fatalf("--json: %d %d", code, code2)
	}
	out += out2
	var got []listed
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r listed
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[0].Key != "done" || got[0].Status != 201 || got[0].Condition != "completed" ||
		got[1].Key != "old" || got[1].Condition != "expired" || got[0].Attempts != 1 ||
		got[0].Route != "POST /v1/charges" || got[1].Route != "" || !strings.Contains(out, `"route":"POST /v1/charges"`) {
		t.Errorf("--json = %+v", got)
	}
}

func TestListMemoryAndErrors(t *testing.T) {
	t.Parallel()
	code, out, errs := run(t, "list", "--store", "memory://", "--json")
	if code != 0 || out != "" || errs != "" {
		t.Errorf("list of an empty memory store: %d %q %q", code, out, errs)
	}
	code, out, _ = run(t, "list", "--store", "memory://")
	if code != 0 || strings.TrimSpace(out) != "KEY  STATE  AGE  ATTEMPTS  LEASE LEFT  STATUS  ROUTE" {
		t.Errorf("list of an empty memory store: %d %q", code, out)
	}
	for _, args := range [][]string{
		{"--state", "done"},
		{"--limit", "0"},
		{"--older-than", "-1m"},
		{"--cursor", "!!"},
		{"somekey"},
	} {
		code, _, errs := run(t, append([]string{"list", "--store", "memory://"}, args...)...)
		if code != 2 || errs == "" {
			t.Errorf("list %q: exit %d %q, want a usage error", args, code, errs)
		}
	}
}

// --state stuck keeps exactly the records console.Stuck calls stuck with --stuck-after: the
// CLI and the console decide "stuck" with one rule.
func TestStateStuckIsConsoleStuck(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	after := 90 * time.Second
	var q idem.ListQuery
	keep, err := stateFilter("stuck", after, &q)
	if err != nil || q.State != idem.StateInProgress {
		t.Fatalf("stateFilter(stuck) = %v, query state %v", err, q.State)
	}
	for _, created := range []time.Duration{0, time.Second, after - time.Microsecond, after, time.Hour} {
		for _, lease := range []time.Duration{-time.Second, 0, time.Second, time.Hour} {
			rec := idem.Record{Key: "k", State: idem.StateInProgress, CreatedAt: now.Add(-created), LeaseUntil: now.Add(lease), ExpiresAt: now.Add(time.Hour)}
			if got, want := keep(rec, now), console.Stuck(rec, now, after); got != want {
				t.Errorf("created %v ago, lease %v: --state stuck keeps it %t, console.Stuck says %t", created, lease, got, want)
			}
		}
	}
}
