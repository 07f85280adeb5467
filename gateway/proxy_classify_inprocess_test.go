package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// classify tells the failures before the request left (a refused or failed dial, a name that
// did not resolve) from those after it may have been read (a reset, an EOF, a timeout).
func TestClassify(t *testing.T) {
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	for _, tc := range []struct {
		name string
		err  error
		want upstreamFailure
	}{
		{"dial timeout", fmt.Errorf("proxy: %w", dialTimeout), notSent},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, notSent},
		{"refused, not as a dial", fmt.Errorf("x: %w", syscall.ECONNREFUSED), notSent},
		{"dns", &net.DNSError{Err: "no such host", Name: "upstream.invalid", IsNotFound: true}, notSent},
		{"reset after write", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, uncertain},
		{"write failed", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, uncertain},
		{"eof", io.ErrUnexpectedEOF, uncertain},
		{"timeout", context.DeadlineExceeded, uncertain},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("%s: classify = %d, want %d", tc.name, got, tc.want)
		}
	}
	if notSent == 0 || uncertain == 0 || notSent == uncertain {
		t.Errorf("notSent %d, uncertain %d: each must be a failure (non-zero) and apart", notSent, uncertain)
	}
}

// A call's deadline tick is 1/16 of the timeout, at most a second and at least a millisecond.
func TestDeadlineTick(t *testing.T) {
	for _, tc := range []struct{ timeout, tick time.Duration }{
		{160 * time.Millisecond, 10 * time.Millisecond},
		{8 * time.Second, 500 * time.Millisecond},
		{16 * time.Second, time.Second},
		{time.Hour, time.Second},
		{8 * time.Millisecond, time.Millisecond},
	} {
		if got := newDeadlines(context.Background(), tc.timeout).tick; got != tc.tick {
			t.Errorf("timeout %v: tick %v, want %v", tc.timeout, got, tc.tick)
		}
	}
}

// logBuffer is a slog handler's output, safe for the gateway's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// RawUpstream is a TCP server that reads one request per connection (head and body), counts
// it, and hands the connection to answer, which writes what it likes and returns; the
// connection is closed after it. It is exported for the end-to-end tests of package
// gateway_test too.
func RawUpstream(t *testing.T, answer func(c net.Conn)) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				n.Add(1)
				answer(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &n
}

// inProcess is a gateway served by httptest in this process, with its log.
func inProcess(t *testing.T, cfg Config) (url string, g *Gateway, logs *logBuffer) {
	t.Helper()
	logs = &logBuffer{}
	cfg.Scope = ScopeNone
	g, err := New(context.Background(), cfg, Options{Store: memstore.New(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv.URL, g, logs
}

// post sends a POST with key and returns its status, Content-Type and body.
func post(t *testing.T, url, key string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/charges", strings.NewReader(`{"amount":1}`))
	req.Header.Set(idem.KeyHeader, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// The upstream's failures, through the gateway in this process: one that never got the
// request (refused) is 502 and releases the key, so a retry runs once the upstream is up; one
// that read it and reset the connection is 502 and holds the key (409); one that never
// answers is 504 once --upstream-timeout has passed, and holds the key. The log says which
// may have been processed.
func TestUpstreamFailuresInProcess(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens: connection refused
		url, _, logs := inProcess(t, Config{Upstream: "http://" + addr, Lease: Duration(20 * time.Second)})
		if status, _, body := post(t, url, "refused-1"); status != 502 || !strings.Contains(body, "nothing was sent") {
			t.Fatalf("refused upstream: %d %.200q, want 502 (nothing was sent)", status, body)
		}
		if !strings.Contains(logs.String(), "maybe_processed=false") {
			t.Errorf("log %q does not say maybe_processed=false", logs.String())
		}
		// The upstream comes up on that address: the retry runs (the claim was released).
		ln, err = net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("the address was taken meanwhile: %v", err)
		}
		var effects atomic.Int32
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			effects.Add(1)
			w.WriteHeader(201)
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
		if status, _, body := post(t, url, "refused-1"); status != 201 || effects.Load() != 1 {
			t.Fatalf("retry after a refused call: %d %.200q with %d effects, want 201 and 1 (the key was not released)", status, body, effects.Load())
		}
	})
	t.Run("reset after read", func(t *testing.T) {
		t.Parallel()
		up, calls := RawUpstream(t, func(c net.Conn) { _ = c.(*net.TCPConn).SetLinger(0) })
		url, _, logs := inProcess(t, Config{Upstream: up, Lease: Duration(20 * time.Second)})
		if status, _, body := post(t, url, "reset-1"); status != 502 || !strings.Contains(body, "may have been processed") {
			t.Fatalf("reset: %d %.200q, want 502 (may have been processed)", status, body)
		}
		if !strings.Contains(logs.String(), "maybe_processed=true") {
			t.Errorf("log %q does not say maybe_processed=true", logs.String())
		}
		for i := range 2 {
			if status, _, body := post(t, url, "reset-1"); status != 409 {
				t.Fatalf("retry %d: %d %.200q, want 409 (held as maybe sent)", i+1, status, body)
			}
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("upstream called %d times, want 1", n)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		up, calls := RawUpstream(t, func(net.Conn) {
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		})
		t.Cleanup(func() { close(release) })
		url, _, _ := inProcess(t, Config{Upstream: up, Lease: Duration(20 * time.Second), UpstreamTimeout: Duration(time.Second)})
		start := time.Now()
		status, _, body := post(t, url, "hung-1")
		if took := time.Since(start); status != 504 || took < 900*time.Millisecond || took > 10*time.Second {
			t.Fatalf("hung upstream: %d %.200q after %v, want 504 after about 1s", status, body, took)
		}
		if status, _, body := post(t, url, "hung-1"); status != 409 {
			t.Fatalf("retry: %d %.200q, want 409 (held as maybe sent)", status, body)
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("upstream called %d times, want 1", n)
		}
	})
}

// Abort cuts the upstream calls still out: each is answered 503 shutting-down, marked as
// maybe processed, never 502 or 504.
func TestAbortCutsTheCall(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up, calls := RawUpstream(t, func(net.Conn) {
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
	})
	t.Cleanup(func() { close(release) })
	url, g, _ := inProcess(t, Config{Upstream: up, Lease: Duration(20 * time.Second)})
	type answer struct {
		status   int
		ct, body string
	}
	done := make(chan answer, 1)
	go func() {
		s, ct, b := post(t, url, "cut-1")
		done <- answer{s, ct, b}
	}()
	for calls.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n := g.Abort(ctx); n != 1 {
		t.Errorf("Abort found %d calls out, want 1", n)
	}
	a := <-done
	if a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, ProblemShuttingDown) {
		t.Fatalf("cut call: %d %.300q, want 503 %s", a.status, a.body, ProblemShuttingDown)
	}
	if status, _, body := post(t, url, "cut-1"); status != 409 {
		t.Fatalf("retry after the cut: %d %.200q, want 409 (held: the call may have been processed)", status, body)
	}
	if !errors.Is(g.Ready(context.Background()), ErrDraining) {
		t.Error("Ready after Abort is not ErrDraining")
	}
}

// The upstream Transport keeps up to 1024 idle connections to the upstream for 90s and bounds
// a TLS handshake to 10s and the wait for a 100 Continue to 1s; it never goes through a proxy
// from the environment.
func TestUpstreamTransportTuning(t *testing.T) {
	tr := upstreamTransport()
	if tr.Proxy != nil {
		t.Error("the upstream Transport uses a proxy")
	}
	if tr.MaxIdleConns != 1024 || tr.MaxIdleConnsPerHost != 1024 {
		t.Errorf("idle connections %d, per host %d, want 1024 each", tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
	}
	if tr.IdleConnTimeout != 90*time.Second || tr.TLSHandshakeTimeout != 10*time.Second || tr.ExpectContinueTimeout != time.Second {
		t.Errorf("idle %v, TLS handshake %v, expect-continue %v, want 90s, 10s, 1s",
			tr.IdleConnTimeout, tr.TLSHandshakeTimeout, tr.ExpectContinueTimeout)
	}
	if !tr.ForceAttemptHTTP2 || tr.DialContext == nil {
		t.Error("HTTP/2 not attempted, or no dialer of the gateway's own")
	}
	if d := upstreamDialer(); d.Timeout != 5*time.Second || d.KeepAlive != 30*time.Second {
		t.Errorf("dial timeout %v, keep-alive %v, want 5s and 30s", d.Timeout, d.KeepAlive)
	}
}
