package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

// cuttable is a TCP forwarder to a store that the test can cut: after cut, every connection
// through it is closed and new ones are refused.
type cuttable struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCuttable(t *testing.T, target string) *cuttable {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cuttable{ln: ln}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(c.cut)
	return c
}

func (c *cuttable) cut() {
	c.ln.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// TestBinaryStoreDownFailsClosed: when the store goes away under a running gateway, a request
// with a new key gets 503 with Retry-After and never reaches the upstream (fail closed, never
// FailOpen), and /readyz says the store is unavailable.
func TestBinaryStoreDownFailsClosed(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	fw := newCuttable(t, addr)
	api, up := upstream(t)
	store := strings.Replace(redisStore(t), addr, fw.ln.Addr().String(), 1) // its keys deleted at the end
	g := startGateway(t, "--upstream", up, "--store", store)
	if a := post(t, g.url, "before", charge); a.status != 201 {
		t.Fatalf("with the store up: %d %s", a.status, a.body)
	}
	fw.cut()
	for i := range 3 {
		a := post(t, g.url, fmt.Sprint("down-", i), charge)
		if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" || !strings.Contains(a.body, "store-unavailable") {
			t.Fatalf("store down: %d %v %s, want 503 with Retry-After", a.status, a.header, a.body)
		}
	}
	if api.Count() != 1 {
		t.Fatalf("the upstream charged %d times, want 1: a request ran while the store was down", api.Count())
	}
	resp, err := http.Get(g.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the store down: %d", resp.StatusCode)
	}
}
