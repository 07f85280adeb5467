package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// freeAddr returns a loopback address nothing listens on (for --metrics-listen).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// closedWithin reads from conn until the server closes it, and fails unless that happens
// within limit. It returns what the server sent before closing.
func closedWithin(t *testing.T, conn net.Conn, limit time.Duration) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(limit))
	b, err := io.ReadAll(conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection was still open after %s (read %q)", limit, b)
	}
	return string(b)
}

// TestBinaryReadTimeoutCutsAStalledBody: a client that sends 3 of the 10 body bytes it
// announced and stalls is cut off after --read-timeout, on the gateway's listener and on the
// metrics listener, and the upstream is never called.
func TestBinaryReadTimeoutCutsAStalledBody(t *testing.T) {
	t.Parallel()
	api, up := upstream(t)
	maddr := freeAddr(t)
	g := startGateway(t, "--upstream", up, "--store", "memory://", "--read-timeout", "1s", "--metrics-listen", maddr)
	for _, addr := range []string{strings.TrimPrefix(g.url, "http://"), maddr} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "POST /v1/charges HTTP/1.1\r\nHost: x\r\nIdempotency-Key: stall-1\r\nContent-Length: 10\r\n\r\n{\"a")
		start := time.Now()
		got := closedWithin(t, conn, 15*time.Second)
		if d := time.Since(start); d < 500*time.Millisecond {
			t.Errorf("%s: closed after %s, before the read timeout", addr, d)
		}
		if got != "" && !strings.HasPrefix(got, "HTTP/1.1 4") {
			t.Errorf("%s: a stalled body was answered %q, want a 4xx or nothing", addr, got)
		}
	}
	if api.Count() != 0 {
		t.Fatalf("the upstream was called %d times for a body that never arrived", api.Count())
	}
}

// TestBinaryIdleTimeoutClosesKeepAlive: a keep-alive connection that carries no request for
// --idle-timeout is closed, on both listeners.
func TestBinaryIdleTimeoutClosesKeepAlive(t *testing.T) {
	t.Parallel()
	_, up := upstream(t)
	maddr := freeAddr(t)
	g := startGateway(t, "--upstream", up, "--store", "memory://", "--idle-timeout", "1s", "--metrics-listen", maddr)
	for _, addr := range []string{strings.TrimPrefix(g.url, "http://"), maddr} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, _ = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("%s: /healthz %d close=%v", addr, resp.StatusCode, resp.Close)
		}
		start := time.Now()
		closedWithin(t, conn, 15*time.Second)
		if d := time.Since(start); d < 500*time.Millisecond {
			t.Errorf("%s: closed after %s, before the idle timeout", addr, d)
		}
	}
}

// TestBinaryWriteTimeoutKeepsTheResult: --write-timeout shorter than the upstream call cuts
// the client off, but not the detached upstream call: its result is stored, and the retry
// gets it replayed, with one effect.
func TestBinaryWriteTimeoutKeepsTheResult(t *testing.T) {
	t.Parallel()
	api, up := upstream(t)
	api.Delay = 2 * time.Second
	g := startGateway(t, "--upstream", up, "--store", sqliteStore(t), "--write-timeout", "500ms")
	req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/charges", strings.NewReader(charge))
	req.Header.Set("Idempotency-Key", "slow-write-1")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 201 && len(b) > 0 {
			t.Fatalf("the answer reached the client after the write timeout: %d %q", resp.StatusCode, b)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		a := post(t, g.url, "slow-write-1", charge)
		if a.status == 201 {
			if a.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the retry executed again: %v %s", a.header, a.body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retry never got the stored answer: %d %s", a.status, a.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if api.Count() != 1 {
		t.Fatalf("charges = %d, want 1", api.Count())
	}
}
