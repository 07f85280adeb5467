package gateway_test

import (
	"net"
	"testing"
)

// An upstream that read the whole request and then reset the connection without a word may
// have acted on it: the gateway takes the failure as "maybe sent", answers 502 and holds the
// key (409 to every retry within the lease), never as "never sent", which would release the
// claim and let each retry execute again. Three POSTs with one key: one effect.
func TestBinaryUpstreamResetAfterReadIsUncertain(t *testing.T) {
	t.Parallel()
	up, calls := rawUpstream(t, func(c net.Conn) {
		_ = c.(*net.TCPConn).SetLinger(0) // the deferred Close sends RST: ECONNRESET at the gateway
	})
	g := startGateway(t, "--upstream", up, "--store", sqliteStore(t), "--lease", "20s")
	first, err := try(g.url, "reset-1")
	if err != nil || first.status != 502 {
		t.Fatalf("first answer: %d %v %.200q, want 502", first.status, err, first.body)
	}
	for i := range 2 {
		a, err := try(g.url, "reset-1")
		if err != nil || a.status != 409 || a.header.Get("Retry-After") == "" {
			t.Fatalf("retry %d: %d %v %.200q, want 409 with Retry-After (held as maybe sent); upstream calls %d",
				i+1, a.status, err, a.body, calls.Load())
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times for 3 POSTs with one key, want 1", n)
	}
}
