package idemclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// A 409 whose Retry-After is longer than the time left is retried at the last useful moment
// rather than given up on: the server's figure is an estimate of when the answer will exist.
func TestRetryAfterCappedByBudget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		opt     Options
		steps   []func(*http.Request) (*http.Response, error)
		sleeps  []time.Duration
		status  int
		gaveUp  bool
		maxLeft time.Duration
	}{
		{"409 30s in a 30s budget", Options{MaxElapsed: 30 * time.Second},
			steps(status(409, "Retry-After", "30"), status(201)), durs(27 * time.Second), 201, false, 0},
		{"409 30s with AttemptTimeout 2s", Options{MaxElapsed: 30 * time.Second, AttemptTimeout: 2 * time.Second},
			steps(status(409, "Retry-After", "30"), status(201)), durs(28 * time.Second), 201, false, 0},
		{"AttemptTimeout above half the budget", Options{MaxElapsed: 10 * time.Second, AttemptTimeout: 8 * time.Second},
			steps(status(409, "Retry-After", "30"), status(201)), durs(5 * time.Second), 201, false, 0},
		{"Retry-After that fits is obeyed", Options{MaxElapsed: 30 * time.Second},
			steps(status(409, "Retry-After", "2"), status(201)), durs(2 * time.Second), 201, false, 0},
		{"still in flight at the last moment", Options{MaxElapsed: 30 * time.Second},
			steps(status(409, "Retry-After", "30")), durs(27 * time.Second), 409, true, 0},
		{"503 with a long Retry-After", Options{MaxElapsed: 30 * time.Second},
			steps(status(503, "Retry-After", "3600"), status(200)), durs(27 * time.Second), 200, false, 0},
		{"backoff past the budget", Options{MaxElapsed: 250 * time.Millisecond, BaseDelay: 100 * time.Millisecond},
			steps(status(503)), durs(100*time.Millisecond, 125*time.Millisecond), 503, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var gaveUp error
			tc.opt.OnEvent = func(e Event) {
				if e.Kind == EventGiveUp {
					gaveUp = e.Err
				}
			}
			f := newFake(t, tc.opt, tc.steps...)
			resp, err := f.RoundTrip(post(t, "x"))
			if err != nil || resp.StatusCode != tc.status {
				t.Fatalf("resp %v err %v", resp, err)
			}
			if fmt.Sprint(f.sleeps) != fmt.Sprint(tc.sleeps) {
				t.Errorf("sleeps %v, want %v", f.sleeps, tc.sleeps)
			}
			if tc.gaveUp != (gaveUp != nil) || tc.gaveUp && !strings.Contains(gaveUp.Error(), "no time left") {
				t.Errorf("give-up %v, want one: %v", gaveUp, tc.gaveUp)
			}
		})
	}
}

func steps(s ...func(*http.Request) (*http.Response, error)) []func(*http.Request) (*http.Response, error) {
	return s
}

func durs(d ...time.Duration) []time.Duration { return d }

// stall answers its first n requests only after hold (or never, if the client leaves first),
// then at once; it counts requests and keeps their keys.
type stall struct {
	n    int32
	hold time.Duration
	body bool // stall mid-body instead of before the headers
	seen atomic.Int32
	mu   sync.Mutex
	keys []string
}

func (s *stall) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.ReadAll(r.Body) // so that the server notices a client that leaves
	i := s.seen.Add(1)
	s.mu.Lock()
	s.keys = append(s.keys, r.Header.Get(idem.KeyHeader))
	s.mu.Unlock()
	if i <= s.n {
		if s.body {
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(201)
			_, _ = io.WriteString(w, "part")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(s.hold):
		}
		if s.body {
			_, _ = io.WriteString(w, "-late")
			return
		}
	}
	w.WriteHeader(201)
	_, _ = io.WriteString(w, "done")
}

func (s *stall) sameKey(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.keys {
		if k == "" || k != s.keys[0] {
			t.Fatalf("keys %q: not one key per intent", s.keys)
		}
	}
}

// An attempt bounded per attempt (AttemptTimeout, or ResponseHeaderTimeout on the base
// transport) that times out may have reached the server: it is retried with the same key.
func TestPerAttemptTimeoutRetried(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		opt  func(base *http.Transport) Options
		body bool
	}{
		{"AttemptTimeout before headers", func(b *http.Transport) Options {
			return Options{Base: b, AttemptTimeout: 300 * time.Millisecond}
		}, false},
		{"AttemptTimeout mid-body", func(b *http.Transport) Options {
			return Options{Base: b, AttemptTimeout: 300 * time.Millisecond}
		}, true},
		{"ResponseHeaderTimeout", func(b *http.Transport) Options {
			b.ResponseHeaderTimeout = 300 * time.Millisecond
			return Options{Base: b}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := &stall{n: 1, hold: 10 * time.Second, body: tc.body}
			srv := httptest.NewServer(s)
			defer srv.Close()
			base := &http.Transport{}
			defer base.CloseIdleConnections()
			opt := tc.opt(base)
			opt.BaseDelay = time.Millisecond
			var firstErr error
			opt.OnEvent = func(e Event) {
				if e.Kind == EventAttempt && e.Attempt == 1 {
					firstErr = e.Err
				}
			}
			c, err := NewClient(opt)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			resp, err := c.Post(srv.URL, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatalf("err %v after %v (first attempt: %v)", err, time.Since(start), firstErr)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 201 || string(b) != "done" || s.seen.Load() != 2 {
				t.Fatalf("%d %q after %d requests", resp.StatusCode, b, s.seen.Load())
			}
			if !Retryable(firstErr) || !errors.Is(firstErr, context.DeadlineExceeded) && !errors.Is(firstErr, ErrAttemptTimeout) {
				t.Errorf("first attempt's error %v", firstErr)
			}
			if opt.AttemptTimeout > 0 && !errors.Is(firstErr, ErrAttemptTimeout) {
				t.Errorf("first attempt's error %v does not match ErrAttemptTimeout", firstErr)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("answer after %v", d)
			}
			s.sameKey(t)
		})
	}
}

// The caller's own deadline is final: no retry once the request's context is done, even with a
// per-attempt timeout that would allow one.
func TestCallerDeadlineNotRetried(t *testing.T) {
	t.Parallel()
	s := &stall{n: 100, hold: 10 * time.Second}
	srv := httptest.NewServer(s)
	defer srv.Close()
	base := &http.Transport{ResponseHeaderTimeout: 5 * time.Second}
	defer base.CloseIdleConnections()
	c, _ := NewClient(Options{Base: base, AttemptTimeout: 5 * time.Second, BaseDelay: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
	_, err := c.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrAttemptTimeout) || s.seen.Load() != 1 {
		t.Fatalf("err %v after %d requests", err, s.seen.Load())
	}
	if Retryable(err) {
		t.Errorf("Retryable(%v) for the caller's own deadline", err)
	}
}

// Retryable classifies errors by type, on errors that net/http really returns.
func TestRetryableClassification(t *testing.T) {
	t.Parallel()
	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	do := func(rt http.RoundTripper, rawURL string) error {
		req, _ := http.NewRequest(http.MethodPost, rawURL, strings.NewReader("x"))
		resp, err := rt.RoundTrip(req)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		return err
	}

	// Connection refused: a port nobody listens on.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + ln.Addr().String()
	ln.Close()
	// Reset mid-answer, and EOF before any answer.
	raw := func(reply string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				_, _ = io.WriteString(c, reply)
				if tc, ok := c.(*net.TCPConn); ok && reply != "" {
					_ = tc.SetLinger(0)
				}
				c.Close()
			}
		}()
		return "http://" + ln.Addr().String()
	}
	reset := raw("HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\npartial")
	eof := raw("")
	// HTTP/2 stream reset: a handler that aborts.
	h2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	h2.EnableHTTP2 = true
	h2.Config.ErrorLog = nil
	h2.StartTLS()
	defer h2.Close()
	h2c := h2.Client().Transport
	// ResponseHeaderTimeout.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/warm" {
			return
		}
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	rht := &http.Transport{ResponseHeaderTimeout: 50 * time.Millisecond}
	defer rht.CloseIdleConnections()
	ctxDeadline := func() error {
		// A connection made beforehand, so that the deadline strikes while waiting for the
		// answer, not while dialling (where net reports its own timeout error).
		c := &http.Client{Transport: &http.Transport{}}
		defer c.CloseIdleConnections()
		if resp, err := c.Post(slow.URL+"/warm", "text/plain", strings.NewReader("x")); err == nil {
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, slow.URL, strings.NewReader("x"))
		_, err := c.Do(req)
		return err
	}

	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", do(plain, closed), true},
		{"reset mid-answer", do(plain, reset), true},
		{"closed before the answer", do(plain, eof), true},
		{"HTTP/2 stream reset", do(h2c, h2.URL), true},
		{"ResponseHeaderTimeout", do(rht, slow.URL), true},
		{"ResponseHeaderTimeout in a *url.Error", &url.Error{Op: "Post", URL: slow.URL, Err: do(rht, slow.URL)}, true},
		{"AttemptTimeout", fmt.Errorf("%w: %w", ErrAttemptTimeout, context.DeadlineExceeded), true},
		{"ECONNRESET", os.NewSyscallError("read", syscall.ECONNRESET), true},
		{"EPIPE", &net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{"io.ErrUnexpectedEOF", fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true},
		{"DNS timeout", &net.DNSError{Err: "timeout", IsTimeout: true}, true},

		{"nil", nil, false},
		{"the caller's deadline", ctxDeadline(), false},
		{"bare DeadlineExceeded", context.DeadlineExceeded, false},
		{"Canceled", fmt.Errorf("x: %w", context.Canceled), false},
		{"unsupported scheme", do(plain, "ftp://127.0.0.1/"), false},
		{"untrusted certificate", do(plain, h2.URL), false},
		{"DNS no such host", &net.DNSError{Err: "no such host", IsNotFound: true}, false},
		{"body not replayable", ErrBodyNotReplayable, false},
		{"unknown error", errors.New("connection reset by peer"), false},
	}
	for _, tc := range cases {
		if (tc.err == nil) != (tc.name == "nil") {
			t.Errorf("%s: produced error %v", tc.name, tc.err)
			continue
		}
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("%s: Retryable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
