package idemclient

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// script is a fake base transport: it answers attempt i with steps[i] and records requests.
type script struct {
	mu     sync.Mutex
	steps  []func(*http.Request) (*http.Response, error)
	reqs   []*http.Request
	bodies []string
}

func (s *script) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	i := len(s.reqs)
	s.reqs = append(s.reqs, r)
	var b []byte
	if r.Body != nil {
		b, _ = io.ReadAll(r.Body)
	}
	s.bodies = append(s.bodies, string(b))
	step := s.steps[min(i, len(s.steps)-1)]
	s.mu.Unlock()
	return step(r)
}

func status(code int, hdr ...string) func(*http.Request) (*http.Response, error) {
	return func(r *http.Request) (*http.Response, error) {
		h := http.Header{}
		for i := 0; i+1 < len(hdr); i += 2 {
			h.Set(hdr[i], hdr[i+1])
		}
		return &http.Response{StatusCode: code, Header: h, Body: io.NopCloser(strings.NewReader("body")), Request: r}, nil
	}
}

func fail(err error) func(*http.Request) (*http.Response, error) {
	return func(*http.Request) (*http.Response, error) { return nil, err }
}

// errReset is what a read on a connection the server reset returns.
var errReset = &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}

// fake wires a Transport to a script with a fake clock that advances on sleep.
type fake struct {
	*Transport
	base   *script
	clock  time.Time
	sleeps []time.Duration
}

func newFake(t *testing.T, opt Options, steps ...func(*http.Request) (*http.Response, error)) *fake {
	t.Helper()
	f := &fake{base: &script{steps: steps}, clock: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	opt.Base = f.base
	tr, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	tr.now = func() time.Time { return f.clock }
	tr.sleep = func(ctx context.Context, d time.Duration) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		f.sleeps = append(f.sleeps, d)
		f.clock = f.clock.Add(d)
		return nil
	}
	tr.rand = func(n int64) int64 { return n - 1 } // the top of the jitter range
	f.Transport = tr
	return f
}

func post(t *testing.T, body string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, "http://api.test/charges", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOneKeyPerIntentAcrossAttempts(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{}, fail(errReset), status(503), status(201))
	req := post(t, `{"amount":10}`)
	resp, err := f.RoundTrip(req)
	if err != nil || resp.StatusCode != 201 {
		t.Fatalf("resp %v err %v", resp, err)
	}
	if len(f.base.reqs) != 3 {
		t.Fatalf("%d attempts, want 3", len(f.base.reqs))
	}
	key := f.base.reqs[0].Header.Get(idem.KeyHeader)
	if len(key) != 36 || key[14] != '7' {
		t.Fatalf("key %q is not a UUIDv7", key)
	}
	for i, r := range f.base.reqs {
		if r.Header.Get(idem.KeyHeader) != key {
			t.Errorf("attempt %d key %q, want %q", i+1, r.Header.Get(idem.KeyHeader), key)
		}
		if f.base.bodies[i] != `{"amount":10}` {
			t.Errorf("attempt %d body %q", i+1, f.base.bodies[i])
		}
	}
	if req.Header.Get(idem.KeyHeader) != "" {
		t.Error("the caller's request was modified")
	}
	// A second logical request gets another key.
	f2 := newFake(t, Options{}, status(200))
	_, _ = f2.RoundTrip(post(t, "x"))
	if f2.base.reqs[0].Header.Get(idem.KeyHeader) == key {
		t.Error("two intents share a key")
	}
}

func TestCallerKeyKept(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{}, status(502), status(200))
	req := post(t, "x")
	req.Header.Set(idem.KeyHeader, "order-42")
	if _, err := f.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	for _, r := range f.base.reqs {
		if r.Header.Get(idem.KeyHeader) != "order-42" {
			t.Fatalf("key replaced: %q", r.Header.Get(idem.KeyHeader))
		}
	}
	f = newFake(t, Options{}, status(502), status(200))
	req = post(t, "x").WithContext(WithKey(context.Background(), "intent-7"))
	_, _ = f.RoundTrip(req)
	for _, r := range f.base.reqs {
		if r.Header.Get(idem.KeyHeader) != "intent-7" {
			t.Fatalf("WithKey not used: %q", r.Header.Get(idem.KeyHeader))
		}
	}
}

func TestWhatIsRetried(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		step     func(*http.Request) (*http.Response, error)
		attempts int
	}{
		{"network error", fail(errReset), 5},
		{"500", status(500), 5},
		{"502", status(502), 5},
		{"503", status(503), 5},
		{"504", status(504), 5},
		{"408", status(408), 5},
		{"429", status(429), 5},
		{"409 in flight", status(409, "Retry-After", "1"), 5},
		{"409 business conflict", status(409), 1},
		{"501", status(501), 1},
		{"400", status(400), 1},
		{"401", status(401), 1},
		{"403", status(403), 1},
		{"404", status(404), 1},
		{"422 mismatch", status(422), 1},
		{"201", status(201), 1},
		{"bad scheme", fail(errors.New(`unsupported protocol scheme "ftp"`)), 1},
		{"cancelled", fail(context.Canceled), 1},
	}
	for _, tc := range cases {
		f := newFake(t, Options{MaxElapsed: time.Hour}, tc.step)
		resp, err := f.RoundTrip(post(t, "x"))
		if len(f.base.reqs) != tc.attempts {
			t.Errorf("%s: %d attempts, want %d", tc.name, len(f.base.reqs), tc.attempts)
		}
		if resp == nil && err == nil {
			t.Errorf("%s: nil response and nil error", tc.name)
		}
		if strings.HasPrefix(tc.name, "network") && !errors.Is(err, ErrGaveUp) {
			t.Errorf("%s: err %v, want ErrGaveUp", tc.name, err)
		}
	}
}

func TestMethods(t *testing.T) {
	t.Parallel()
	for method, want := range map[string]int{"POST": 3, "PATCH": 3, "GET": 3, "PUT": 3, "DELETE": 3, "CONNECT": 1, "PROPFIND": 1} {
		f := newFake(t, Options{MaxAttempts: 3}, status(503))
		req, _ := http.NewRequest(method, "http://api.test/x", nil)
		_, _ = f.RoundTrip(req)
		if len(f.base.reqs) != want {
			t.Errorf("%s: %d attempts, want %d", method, len(f.base.reqs), want)
		}
		hasKey := f.base.reqs[0].Header.Get(idem.KeyHeader) != ""
		if hasKey != (method == "POST" || method == "PATCH") {
			t.Errorf("%s: key set = %v", method, hasKey)
		}
	}
}

func TestBackoffFullJitterTiming(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{MaxAttempts: 8, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, MaxElapsed: time.Hour}, status(503))
	_, _ = f.RoundTrip(post(t, "x"))
	want := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000} // ms, the top of each range
	if len(f.sleeps) != len(want) {
		t.Fatalf("sleeps %v", f.sleeps)
	}
	for i, d := range f.sleeps {
		if d != want[i]*time.Millisecond {
			t.Errorf("sleep %d = %v, want %v", i, d, want[i]*time.Millisecond)
		}
	}
}

// The jitter is uniform over [0, ceiling]: checked on 20,000 real draws with a chi-square test
// over 10 buckets (critical value 27.9 for 9 degrees of freedom at p = 0.001) and on the mean.
func TestJitterSpread(t *testing.T) {
	t.Parallel()
	tr, _ := New(Options{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second})
	const n, buckets = 20000, 10
	ceiling := 400 * time.Millisecond
	var count [buckets]int
	var sum float64
	for range n {
		d := tr.sched.Backoff(3, tr.rand)
		if d < 0 || d > ceiling {
			t.Fatalf("delay %v outside [0, %v]", d, ceiling)
		}
		count[min(buckets-1, int(float64(d)/float64(ceiling)*buckets))]++
		sum += float64(d)
	}
	exp := float64(n) / buckets
	var chi float64
	for _, c := range count {
		chi += (float64(c) - exp) * (float64(c) - exp) / exp
	}
	if chi > 27.9 {
		t.Errorf("chi-square %.1f: jitter not uniform: %v", chi, count)
	}
	if mean := sum / n; math.Abs(mean-float64(ceiling)/2) > float64(ceiling)*0.03 {
		t.Errorf("mean delay %v, want about %v", time.Duration(mean), ceiling/2)
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{MaxElapsed: time.Hour}, status(503, "Retry-After", "7"), status(200))
	if _, err := f.RoundTrip(post(t, "x")); err != nil {
		t.Fatal(err)
	}
	if len(f.sleeps) != 1 || f.sleeps[0] != 7*time.Second {
		t.Fatalf("sleeps %v, want [7s]", f.sleeps)
	}
	date := time.Date(2026, 11, 30, 12, 0, 12, 0, time.UTC).Format(http.TimeFormat) // the fake clock starts at 12:00:00
	f = newFake(t, Options{MaxElapsed: time.Hour}, status(429, "Retry-After", date), status(200))
	_, _ = f.RoundTrip(post(t, "x"))
	if len(f.sleeps) != 1 || f.sleeps[0] != 12*time.Second {
		t.Fatalf("sleeps %v, want [12s]", f.sleeps)
	}
	// A Retry-After beyond the total time: one more attempt at the last useful moment (the
	// budget less a tenth), then give up and return the server's answer.
	f = newFake(t, Options{MaxElapsed: 5 * time.Second}, status(503, "Retry-After", "60"))
	resp, err := f.RoundTrip(post(t, "x"))
	if err != nil || resp.StatusCode != 503 || len(f.base.reqs) != 2 || len(f.sleeps) != 1 || f.sleeps[0] != 4500*time.Millisecond {
		t.Fatalf("resp %v err %v attempts %d sleeps %v", resp, err, len(f.base.reqs), f.sleeps)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "body" {
		t.Errorf("last response body %q was not left for the caller", b)
	}
}

func TestDeadlinesAndCancellation(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{MaxElapsed: 250 * time.Millisecond, BaseDelay: 100 * time.Millisecond}, fail(errReset))
	_, err := f.RoundTrip(post(t, "x"))
	if !errors.Is(err, ErrGaveUp) || !strings.Contains(err.Error(), "no time left") {
		t.Fatalf("err %v", err)
	}
	var total time.Duration
	for _, d := range f.sleeps {
		total += d
	}
	if total > 250*time.Millisecond {
		t.Errorf("slept %v past MaxElapsed", total)
	}
	// The context deadline wins over MaxElapsed.
	ctx, cancel := context.WithDeadline(context.Background(), f.clock.Add(150*time.Millisecond))
	defer cancel()
	f2 := newFake(t, Options{MaxElapsed: time.Hour}, fail(errReset))
	f2.clock = f.clock
	_, _ = f2.RoundTrip(post(t, "x").WithContext(ctx))
	if len(f2.base.reqs) > 2 {
		t.Errorf("%d attempts within a 150ms deadline", len(f2.base.reqs))
	}
	// Cancellation stops at once, with the real sleep.
	tr, _ := New(Options{Base: &script{steps: []func(*http.Request) (*http.Response, error){status(503)}}, BaseDelay: time.Hour, MaxDelay: time.Hour, MaxElapsed: 10 * time.Hour})
	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel2)
	start := time.Now()
	_, err = tr.RoundTrip(post(t, "x").WithContext(ctx2))
	if !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

func TestBodyNotReplayable(t *testing.T) {
	t.Parallel()
	f := newFake(t, Options{}, status(503), status(200))
	req := post(t, "x")
	req.Body = io.NopCloser(io.MultiReader(strings.NewReader("streamed")))
	req.GetBody = nil
	_, err := f.RoundTrip(req)
	if !errors.Is(err, ErrBodyNotReplayable) || len(f.base.reqs) != 1 {
		t.Fatalf("err %v attempts %d", err, len(f.base.reqs))
	}
	if !strings.Contains(err.Error(), "503") {
		t.Errorf("error does not say why a retry was needed: %v", err)
	}
	// Replayable bodies of every kind http.NewRequest knows are sent whole on each attempt.
	f = newFake(t, Options{}, status(503), status(200))
	req, _ = http.NewRequest("POST", "http://api.test/", bytes.NewBufferString("buffered"))
	_, _ = f.RoundTrip(req)
	if f.base.bodies[1] != "buffered" {
		t.Errorf("retry body %q", f.base.bodies[1])
	}
}

func TestBudget(t *testing.T) {
	t.Parallel()
	b := NewRetryBudget(3, 0.5)
	f := newFake(t, Options{RetryBudget: b, MaxElapsed: time.Hour}, status(503))
	_, _ = f.RoundTrip(post(t, "x"))
	if len(f.base.reqs) != 4 || b.Tokens() != 0 {
		t.Fatalf("attempts %d tokens %v, want 4 and 0", len(f.base.reqs), b.Tokens())
	}
	f = newFake(t, Options{RetryBudget: b}, status(503))
	_, _ = f.RoundTrip(post(t, "y"))
	if len(f.base.reqs) != 1 {
		t.Fatalf("retried with an empty budget: %d attempts", len(f.base.reqs))
	}
	f = newFake(t, Options{RetryBudget: b}, status(200))
	_, _ = f.RoundTrip(post(t, "z"))
	_, _ = f.RoundTrip(post(t, "z"))
	if b.Tokens() != 1 {
		t.Fatalf("tokens after two successes %v, want 1", b.Tokens())
	}
}

func TestEvents(t *testing.T) {
	t.Parallel()
	var kinds []string
	f := newFake(t, Options{MaxAttempts: 2, OnEvent: func(e Event) { kinds = append(kinds, e.Kind.String()) }}, status(503))
	_, _ = f.RoundTrip(post(t, "x"))
	if got := strings.Join(kinds, ","); got != "attempt,retry,attempt,give_up" {
		t.Fatalf("events %s", got)
	}
}

func TestIntentKey(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	a := IntentKey(secret, "charge", "order-1")
	if a != IntentKey(secret, "charge", "order-1") || len(a) != 43 {
		t.Fatalf("not stable: %q", a)
	}
	for _, other := range []string{IntentKey(secret, "charge", "order-2"), IntentKey(secret, "chargeorder-1"),
		IntentKey([]byte("other"), "charge", "order-1"), IntentKey(secret, "charg", "eorder-1")} {
		if other == a {
			t.Fatal("distinct intents share a key")
		}
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for field, opt := range map[string]Options{
		"MaxAttempts":    {MaxAttempts: -1},
		"BaseDelay":      {BaseDelay: -1},
		"MaxDelay":       {BaseDelay: time.Second, MaxDelay: time.Millisecond},
		"MaxElapsed":     {MaxElapsed: -1},
		"AttemptTimeout": {AttemptTimeout: -1},
	} {
		if _, err := New(opt); !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), "Options."+field) {
			t.Errorf("%s: err %v", field, err)
		}
	}
}
