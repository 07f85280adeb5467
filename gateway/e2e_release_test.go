package gateway_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBinaryReleaseRefusedWhileRunning: an operator who runs idem release on a key whose
// request is still running upstream is refused (its lease is live), so the retry gets 409 and
// the effect happens once; inspect shows the key as running, then completed.
func TestBinaryReleaseRefusedWhileRunning(t *testing.T) {
	t.Parallel()
	api, up := upstream(t)
	api.Delay = 3 * time.Second
	store := sqliteStore(t)
	g := startGateway(t, "--upstream", up, "--store", store)
	first := make(chan answer, 1)
	go func() { first <- post(t, g.url, "op-1", charge) }()
	// The storage key is SCOPE|KEY; with --scope none the scope is empty.
	const key = "|op-1"
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command(idemBinary(t), "inspect", key, "--store", store).CombinedOutput()
		if err == nil && strings.Contains(string(out), "running") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key never showed as running: %v %s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, err := exec.Command(idemBinary(t), "release", key, "--store", store).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--force") {
		t.Fatalf("idem release of a running key: %v %s, want a refusal", err, out)
	}
	if a := post(t, g.url, "op-1", charge); a.status != 409 {
		t.Fatalf("retry while the first runs: %d %s, want 409", a.status, a.body)
	}
	if a := <-first; a.status != 201 {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	if a := post(t, g.url, "op-1", charge); a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after: %d %v", a.status, a.header)
	}
	if out, err := exec.Command(idemBinary(t), "inspect", "--store", store, key).CombinedOutput(); err != nil || !strings.Contains(string(out), "completed") {
		t.Fatalf("inspect after: %v %s", err, out)
	}
	if api.Count() != 1 {
		t.Fatalf("charges = %d, want 1", api.Count())
	}
}
