package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// TestFlagsBeforeOrAfterArguments: every command takes its flags before, between or after its
// arguments, with the same result; --json outputs parse; stray arguments are usage errors.
func TestFlagsBeforeOrAfterArguments(t *testing.T) {
	t.Parallel()
	store := seed(t) // done, stuck, stale, held, old
	same := func(name string, orders ...[]string) string {
		t.Helper()
		var first string
		for i, args := range orders {
			code, out, errs := run(t, args...)
			if code != 0 {
				t.Fatalf("%s %q: exit %d %s", name, args, code, errs)
			}
			out = stripAge(out)
			if i == 0 {
				first = out
			} else if out != first {
				t.Errorf("%s: %q prints\n%s\nbut %q prints\n%s", name, orders[0], first, args, out)
			}
		}
		return first
	}
	out := same("inspect",
		[]string{"inspect", "--store", store, "--json", "done"},
		[]string{"inspect", "done", "--store", store, "--json"},
		[]string{"inspect", "--json", "done", "--store", store})
	var in map[string]any
	if err := json.Unmarshal([]byte(out), &in); err != nil || in["condition"] != "completed" {
		t.Errorf("inspect --json: %v %s", err, out)
	}
	out = same("list",
		[]string{"list", "--json", "--state", "stuck", "--store", store},
		[]string{"list", "--store", store, "--state", "stuck", "--json"})
	if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != 2 {
		t.Errorf("list --state stuck --json: %d lines\n%s", n, out)
	}
	same("migrate", []string{"migrate", "--store", store})
	if out := same("sweep", []string{"sweep", "--batch", "10", "--store", store}); out != "deleted 1 expired records\n" {
		t.Errorf("sweep: %q", out)
	}
	if out := same("sweep", []string{"sweep", "--store", store, "--batch", "10"}); out != "deleted 0 expired records\n" {
		t.Errorf("sweep again: %q", out)
	}
	same("version", []string{"version"}, []string{"--version"})

	// release: the flag after the key takes effect (--force on a running key, --json).
	code, out, errs := run(t, "release", "stuck", "--store", store, "--json")
	var rel releaseResult
	if err := json.Unmarshal([]byte(out), &rel); code != 1 || err != nil || rel.Action != "refused" || rel.Condition != "running" {
		t.Fatalf("release stuck --json without --force: %d %+v %v %s", code, rel, err, errs)
	}
	code, out, errs = run(t, "release", "stuck", "--store", store, "--json", "--force")
	if err := json.Unmarshal([]byte(out), &rel); code != 0 || err != nil || rel.Action != "released" || rel.Token == 0 {
		t.Fatalf("release stuck --force --json: %d %+v %v %s", code, rel, err, errs)
	}
	code, out, _ = run(t, "release", "--json", "--store", store, "stale")
	if err := json.Unmarshal([]byte(out), &rel); code != 0 || err != nil || rel.Action != "released" || rel.Condition != "stale" {
		t.Fatalf("release --json stale: %d %+v %v", code, rel, err)
	}
	code, out, _ = run(t, "release", "stale", "--store", store)
	if code != 0 || !strings.Contains(out, "already released") {
		t.Fatalf("release stale again: %d %s", code, out)
	}

	for _, args := range [][]string{
		{"migrate", "--store", store, "extra"},
		{"sweep", "extra", "--store", store},
		{"version", "extra"},
		{"serve", "extra", "--scope", "none", "--upstream", "http://127.0.0.1:1"},
		{"list", "--store", store, "extra"},
		{"inspect", "done", "stuck", "--store", store},
		{"inspect", "done", "--store"},
	} {
		if code, _, errs := run(t, args...); code != 2 || errs == "" {
			t.Errorf("%q: exit %d %q, want a usage error", args, code, errs)
		}
	}
}

// stripAge removes what changes in an output from one run to the next: the age and the
// time left.
func stripAge(out string) string {
	return ageField.ReplaceAllString(out, "")
}

var ageField = regexp.MustCompile(`(?m)"(age|lease_left|expires_in)": ?"[^"]*",?|^(age|lease left|expires in) .*$`)
