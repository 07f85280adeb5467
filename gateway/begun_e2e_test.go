package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/gateway"
	"github.com/idemkit/idem/idemhttp"
)

// Begun is not undone: once the upstream began to answer, or the answer began to reach the
// client, a failure that comes later never releases the claim. These tests run the built
// binary against upstreams that fail mid-answer and clients that leave mid-download, and
// count the upstream's effects.

// rawUpstream is gateway.RawUpstream: a TCP server that counts each request it reads whole and
// hands the connection to answer.
var rawUpstream = gateway.RawUpstream

// try sends a POST with key; a broken answer is an error, not a test failure.
func try(url, key string) (answer, error) {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/charges", strings.NewReader(charge))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}, err
}

const head201 = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"

// The upstream sends 201 and its headers, then the answer breaks off. The effect may have
// happened: every retry within the lease gets 409 (held as uncertain), none executes again,
// and the first client never sees a 201 (no partial success).
func TestBinaryUpstreamFailsMidAnswer(t *testing.T) {
	t.Parallel()
	part := strings.Repeat("x", 100)
	cases := []struct {
		name   string
		answer func(c net.Conn)
		args   []string
	}{
		{"closed mid-body", func(c net.Conn) { io.WriteString(c, head201+part) }, nil},
		{"reset mid-body", func(c net.Conn) {
			io.WriteString(c, head201+part)
			time.Sleep(50 * time.Millisecond)
			c.(*net.TCPConn).SetLinger(0) // close with RST
		}, nil},
		{"chunked body cut short", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"id\":\"ch_1\",\"a\"\r\n")
		}, nil},
		{"upstream timeout mid-body", func(c net.Conn) {
			io.WriteString(c, head201+part)
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, _ = io.Copy(io.Discard, c) // until the gateway gives up and closes
		}, []string{"--upstream-timeout", "1s"}},
		{"closed mid-body, uncertain hold", func(c net.Conn) { io.WriteString(c, head201+part) }, []string{"--uncertain", "hold"}},
		{"closed mid-body of a streamed answer", func(c net.Conn) {
			io.WriteString(c, head201+part+strings.Repeat("y", 500)) // beyond --max-body: already streaming
		}, []string{"--max-body", "256"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, calls := rawUpstream(t, tc.answer)
			g := startGateway(t, append([]string{"--upstream", up, "--store", sqliteStore(t), "--lease", "20s"}, tc.args...)...)
			first, err := try(g.url, "cut-1")
			if err == nil && first.status < 300 {
				t.Fatalf("first answer: %d %.200q: a broken upstream answer passed for a success", first.status, first.body)
			}
			t.Logf("first answer: %d, %v", first.status, err)
			for i := range 2 {
				a, err := try(g.url, "cut-1")
				if err != nil || a.status != 409 || a.header.Get("Retry-After") == "" {
					t.Fatalf("retry %d: %d %v %.200q, want 409 with Retry-After (held); upstream calls %d", i+1, a.status, err, a.body, calls.Load())
				}
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("upstream called %d times for 3 POSTs with one key, want 1", n)
			}
		})
	}
}

// A response larger than --max-body streams through; the client leaves mid-download. The
// effect happened: the record is completed without the body, and the retry gets the
// not-retained problem with the original status, never a second execution.
func TestBinaryClientLeavesMidDownload(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	chunk := strings.Repeat("z", 32<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		calls.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		for range 200 { // 6.4 MiB over about 4s: the client is gone long before the end
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}))
	defer srv.Close()
	g := startGateway(t, "--upstream", srv.URL, "--store", sqliteStore(t), "--max-body", "64KiB", "--wait", "20s")

	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nIdempotency-Key: big-1\r\nContent-Length: %d\r\n\r\n%s", len(charge), charge)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 201 {
		t.Fatalf("first answer: %d", resp.StatusCode)
	}
	if _, err := io.CopyN(io.Discard, resp.Body, 128<<10); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetLinger(0)
	c.Close() // the client gives up mid-download

	a, err := try(g.url, "big-1")
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(a.body, idemhttp.ProblemNotRetained) {
		t.Fatalf("retry: %d %v %.200q, want 201 replayed with the not-retained problem (upstream calls %d)", a.status, a.header, a.body, calls.Load())
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
}

// The client gives up while the upstream call, detached from it, runs longer than the lease:
// the heartbeat goes on while the call does, so the retry finds the key in flight (not a lapsed
// lease to take over), and later gets the stored answer.
func TestBinaryClientGoneUpstreamSlowerThanLease(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		n := calls.Add(1)
		time.Sleep(5 * time.Second)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, n)
	}))
	defer srv.Close()
	g := startGateway(t, "--upstream", srv.URL, "--store", sqliteStore(t), "--lease", "2s")
	start := time.Now()
	c := &http.Client{Timeout: 500 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/charges", strings.NewReader(charge))
	req.Header.Set("Idempotency-Key", "slow-1")
	if _, err := c.Do(req); err == nil {
		t.Fatal("the client was expected to give up")
	}
	time.Sleep(time.Until(start.Add(3 * time.Second))) // past the lease, before the upstream answers
	a, err := try(g.url, "slow-1")
	if err != nil || a.status != 409 {
		t.Fatalf("retry past the lease: %d %v %.200q, want 409 (still in flight); upstream calls %d", a.status, err, a.body, calls.Load())
	}
	// Another payload with the key while it is in flight: 422, not 409.
	if other := post(t, g.url, "slow-1", `{"amount":5,"currency":"eur"}`); other.status != 422 {
		t.Fatalf("another payload while in flight: %d %.200q, want 422", other.status, other.body)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
	time.Sleep(time.Until(start.Add(7 * time.Second))) // the upstream has answered
	a, err = try(g.url, "slow-1")
	if err != nil || a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" || a.body != `{"id":"ch_1"}` {
		t.Fatalf("retry after the answer: %d %v %.200q, want the stored 201; upstream calls %d", a.status, err, a.body, calls.Load())
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("upstream called %d times, want 1", n)
	}
}

// An upstream answer received whole is stored, even if the upstream then drops the connection:
// the retries replay it.
func TestBinaryUpstreamClosesAfterWholeAnswer(t *testing.T) {
	t.Parallel()
	const body = `{"id":"ch_1","amount":1000}`
	for name, raw := range map[string]string{
		"content-length": "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + body,
		"chunked":        "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up, calls := rawUpstream(t, func(c net.Conn) { io.WriteString(c, raw) })
			g := startGateway(t, "--upstream", up, "--store", sqliteStore(t))
			for i := range 3 {
				a, err := try(g.url, "whole-1")
				if err != nil || a.status != 201 || a.body != body || (i > 0) != (a.header.Get("Idempotent-Replayed") == "true") {
					t.Fatalf("POST %d: %d %v %.200q %v", i+1, a.status, err, a.body, a.header)
				}
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("upstream called %d times, want 1", n)
			}
		})
	}
}

// An answer cut mid-body shows in the metrics: the upstream call failed (the request counts as
// upstream_error, as one whose upstream never answered does), nothing is left in flight.
func TestBinaryMidAnswerMetrics(t *testing.T) {
	t.Parallel()
	up, _ := rawUpstream(t, func(c net.Conn) { io.WriteString(c, head201+"partial") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	maddr := ln.Addr().String()
	ln.Close()
	g := startGateway(t, "--upstream", up, "--store", "memory://", "--metrics-listen", maddr)
	_, _ = try(g.url, "m-cut")
	if a, err := try(g.url, "m-cut"); err != nil || a.status != 409 {
		t.Fatalf("retry: %d %v", a.status, err)
	}
	var b []byte
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + maddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "idem_requests_in_flight 0") || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{`idem_upstream_seconds_count{result="error"} 1`, `idem_requests_total{outcome="upstream_error"} 1`,
		`idem_requests_total{outcome="in_flight"} 1`, "idem_requests_in_flight 0"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
