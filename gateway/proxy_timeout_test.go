package gateway_test

import (
	"net"
	"testing"
	"time"
)

// --upstream-timeout bounds the upstream call: an upstream that takes the request and never
// answers gets 504 (a timeout, not 502) once the timeout has passed, and the key is held
// only for its lease, not forever by the heartbeat of a call that never ends. After the
// lease, a retry takes over.
func TestBinaryUpstreamTimeoutAnswers504(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up, calls := rawUpstream(t, func(c net.Conn) {
		select { // hang, without a byte of answer, until the test ends
		case <-release:
		case <-time.After(60 * time.Second):
		}
	})
	t.Cleanup(func() { close(release) })
	g := startGateway(t, "--upstream", up, "--store", sqliteStore(t), "--upstream-timeout", "1s", "--lease", "2s")

	start := time.Now()
	first, err := try(g.url, "hung-1")
	took := time.Since(start)
	if err != nil {
		t.Fatalf("first answer: %v after %s (the upstream timeout was not honoured)", err, took)
	}
	if first.status != 504 {
		t.Fatalf("first answer: %d %.200q after %s, want 504", first.status, first.body, took)
	}
	if took < 900*time.Millisecond || took > 10*time.Second {
		t.Fatalf("answered after %s, want about the 1s upstream timeout", took)
	}
	// Held as maybe sent within the lease...
	if a, err := try(g.url, "hung-1"); err != nil || a.status != 409 {
		t.Fatalf("retry within the lease: %d %v %.200q, want 409", a.status, err, a.body)
	}
	// ...and no longer once the lease has run out: the heartbeat stopped with the call.
	deadline := time.Now().Add(15 * time.Second)
	for calls.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the key is still held 15s after a 1s timeout and a 2s lease (upstream calls %d)", calls.Load())
		}
		time.Sleep(500 * time.Millisecond)
		a, err := try(g.url, "hung-1")
		if err != nil || (a.status != 409 && a.status != 504) {
			t.Fatalf("retry: %d %v %.200q, want 409 (held) or 504 (taken over, timed out)", a.status, err, a.body)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("upstream calls %d, want 2", calls.Load())
	}
}
