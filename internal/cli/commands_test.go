package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/syncbuf"
	"github.com/idemkit/idem/store/sqlitestore"
)

// run runs the idem command in-process and returns its exit code and output. The store
// clients' logger is process-wide, so a client of a test running in parallel may write to
// this command's stderr after it has returned: the buffers are safe for that.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb syncbuf.Buffer
	code := Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// seed creates a SQLite store with one completed and one in-progress key.
func seed(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	fp := idem.Fingerprint([]byte("x"))
	res, _ := st.Reserve(ctx, idem.ReserveRequest{Key: "done", Fingerprint: fp, Route: "POST /v1/charges", Now: now, Lease: time.Minute, TTL: time.Hour})
	if err := st.Complete(ctx, "done", res.Record.Token, idem.Response{Status: 201, Body: []byte(`{"id":"ch_1"}`)}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "stuck", Fingerprint: fp, Now: now, Lease: time.Hour, TTL: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	// A claim whose holder died a minute ago (lease run out, record live).
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "stale", Fingerprint: fp, Now: now.Add(-2 * time.Minute), Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	// A claim held as uncertain: its lease extended to the record's expiry.
	res, _ = st.Reserve(ctx, idem.ReserveRequest{Key: "held", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err := st.Extend(ctx, "held", res.Record.Token, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	res, _ = st.Reserve(ctx, idem.ReserveRequest{Key: "old", Fingerprint: fp, Now: now.Add(-3 * time.Hour), Lease: time.Minute, TTL: time.Hour})
	_ = st.Complete(ctx, "old", res.Record.Token, idem.Response{Status: 200}, now.Add(-3*time.Hour), now.Add(-2*time.Hour))
	return "sqlite://" + path
}

func TestInspect(t *testing.T) {
	t.Parallel()
	store := seed(t)
	code, out, errs := run(t, "inspect", "--store", store, "--body", "done")
	if code != 0 || !strings.Contains(out, "completed") || !strings.Contains(out, "status       201") || !strings.Contains(out, `{"id":"ch_1"}`) ||
		!strings.Contains(out, "route        POST /v1/charges\n") {
		t.Fatalf("code %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = run(t, "inspect", "--store", store, "--json", "stuck")
	if code != 0 || !strings.Contains(out, `"state": "in_progress"`) || !strings.Contains(out, `"lease_left"`) {
		t.Fatalf("code %d\n%s", code, out)
	}
	if strings.Contains(out, `"route"`) {
		t.Errorf("a record without a route has one in --json:\n%s", out)
	}
	code, out, _ = run(t, "inspect", "--store", store, "--json", "done")
	if code != 0 || !strings.Contains(out, `"route": "POST /v1/charges"`) {
		t.Fatalf("--json of a routed record: code %d\n%s", code, out)
	}
	if code, _, errs = run(t, "inspect", "--store", store, "nope"); code != 1 || !strings.Contains(errs, "no record") {
		t.Fatalf("missing key: code %d %s", code, errs)
	}
	if code, _, _ = run(t, "inspect", "--store", store); code != 2 {
		t.Fatalf("no key: code %d, want 2", code)
	}
}

// TestRelease: a key whose lease is live (running, or held uncertain) is not released
// without --force, since a retry would then execute while the first may still act; a stale
// one is; inspect tells the conditions apart, and flags may follow the key.
func TestRelease(t *testing.T) {
	t.Parallel()
	store := seed(t)
	for key, want := range map[string]string{"stuck": "running", "held": "held", "stale": "stale", "done": "completed", "old": "expired"} {
		code, out, errs := run(t, "inspect", key, "--store", store, "--json")
		if code != 0 || !strings.Contains(out, `"condition": "`+want+`"`) {
			t.Errorf("inspect %s: code %d, want condition %s\n%s%s", key, code, want, out, errs)
		}
	}
	for _, key := range []string{"stuck", "held"} {
		code, _, errs := run(t, "release", key, "--store", store)
		if code != 1 || !strings.Contains(errs, "--force") {
			t.Fatalf("release of a live lease (%s): code %d %s", key, code, errs)
		}
	}
	code, out, errs := run(t, "release", "--store", store, "stale")
	if code != 0 || !strings.Contains(out, "released stale key") {
		t.Fatalf("stale: code %d %s %s", code, out, errs)
	}
	code, out, errs = run(t, "release", "stuck", "--force", "--store", store)
	if code != 0 || !strings.Contains(out, "released running key") {
		t.Fatalf("--force on a running key: code %d %s %s", code, out, errs)
	}
	_, out, _ = run(t, "inspect", "--store", store, "stuck")
	if !strings.Contains(out, "released:") || strings.Contains(out, "lease left") || strings.Contains(out, "expires in") {
		t.Fatalf("after release:\n%s", out)
	}
	if code, out, _ = run(t, "release", "--store", store, "stuck"); code != 0 || !strings.Contains(out, "already released") {
		t.Fatalf("released twice: %d %s", code, out)
	}
	code, _, errs = run(t, "release", "--store", store, "done")
	if code != 1 || !strings.Contains(errs, "--force") {
		t.Fatalf("completed without --force: code %d %s", code, errs)
	}
	code, out, errs = run(t, "release", "--store", store, "--force", "done")
	if strings.Contains(errs, "cannot delete") {
		t.Skip("sqlitestore does not implement idem.Deleter yet")
	}
	if code != 0 || !strings.Contains(out, "deleted completed key") || !strings.Contains(out, "replay cache") {
		t.Fatalf("--force: code %d %s %s", code, out, errs)
	}
	if code, _, _ := run(t, "inspect", "a", "b", "--store", store); code != 2 {
		t.Fatalf("two keys: code %d, want 2", code)
	}
}

func TestSweepAndMigrate(t *testing.T) {
	t.Parallel()
	store := seed(t)
	if code, out, errs := run(t, "migrate", "--store", store); code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	code, out, errs := run(t, "sweep", "--store", store)
	if code != 0 || !strings.Contains(out, "deleted 1 expired records") {
		t.Fatalf("sweep: %d %s %s", code, out, errs)
	}
	if code, _, _ := run(t, "sweep", "--store", "bogus://x"); code != 1 {
		t.Fatalf("unknown scheme: code %d", code)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	if code, out, _ := run(t, "help"); code != 0 || !strings.Contains(out, "inspect") {
		t.Fatalf("help: %d %s", code, out)
	}
	if code, _, _ := run(t, "frobnicate"); code != 2 {
		t.Fatalf("unknown command: %d", code)
	}
	if code, out, _ := run(t, "version"); code != 0 || !strings.HasPrefix(out, "idem ") {
		t.Fatalf("version: %d %s", code, out)
	}
}

// A one-shot command against a store that is down says so in one line: the store client's own
// lines (go-redis logging each failed dial to the process's stderr) stay out of the way. The
// command runs in a process of its own, whose stderr the test reads whole.
func TestStoreDownIsOneLine(t *testing.T) {
	args := []string{"release", "--store", "redis://127.0.0.1:1", "--scope", "none", "k"}
	if os.Getenv("IDEM_CLI_SUBPROCESS") == "1" {
		os.Exit(Main(context.Background(), args, os.Stdout, os.Stderr))
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoreDownIsOneLine$")
	cmd.Env = append(os.Environ(), "IDEM_CLI_SUBPROCESS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("idem %s: %v, want exit status 1\n%s", strings.Join(args, " "), err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "connection refused") {
		t.Errorf("release against a Redis that is down: stderr has %d lines:\n%s\nwant the failure in one line", len(lines), stderr.String())
	}
}
