package idemhttp_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// A handler may use every status net/http accepts, 100 to 999: an informational 100 goes to
// the client and the final status is stored and replayed; 999 reaches the client (the policy
// then decides, like any status at or above 500, that it is not kept).
func TestStatusRangeEnds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/continue" {
			w.WriteHeader(http.StatusContinue)
			w.WriteHeader(http.StatusCreated)
		} else {
			w.WriteHeader(999)
		}
		_, _ = io.WriteString(w, "done")
	}))
	first := b.do(http.MethodPost, "/continue", "k1", `{}`)
	again := b.do(http.MethodPost, "/continue", "k1", `{}`)
	if first.Status != http.StatusCreated || string(first.Body) != "done" || again.Status != http.StatusCreated ||
		string(again.Body) != "done" || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after a 100: first %d %q, replay %d %q %v; want 201 done, replayed", first.Status, first.Body, again.Status, again.Body, again.Header)
	}
	if r := b.do(http.MethodPost, "/max", "k2", `{}`); r.Status != 999 || string(r.Body) != "done" {
		t.Fatalf("status 999: got %d %q", r.Status, r.Body)
	}
}

// An explicit WriteHeader(200) is held like any final status: the response leaves only once
// stored, with the headers the middleware adds (here Idempotency-Expires).
func TestExplicitOKIsHeldUntilStored(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, idem.Options{}, idemhttp.Options{ExpiresHeader: true, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok")
	}))
	r := b.do(http.MethodPost, "/", "k", `{}`)
	if r.Status != http.StatusOK || r.Header.Get(idemhttp.ExpiresHeader) == "" {
		t.Fatalf("got %d with headers %v; want 200 with %s", r.Status, r.Header, idemhttp.ExpiresHeader)
	}
}

// A response of exactly MaxResponseBody bytes is kept and replayed, even when the buffer had
// to grow to hold it (the limit is above the largest pooled buffer, 64 KiB).
func TestResponseOfExactlyMaxIsKept(t *testing.T) {
	t.Parallel()
	const max = 100_000
	b := setup(t, nil, idem.Options{}, idemhttp.Options{MaxResponseBody: max, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("a", 60_000))
		_, _ = io.WriteString(w, strings.Repeat("b", max-60_000))
	}))
	first := b.do(http.MethodPost, "/", "k", `{}`)
	again := b.do(http.MethodPost, "/", "k", `{}`)
	if len(first.Body) != max || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d bytes, replay %d %q…; want the %d bytes replayed", len(first.Body), again.Status, clip(again.Body), max)
	}
}

// An answer without a body gets no Content-Type it did not set, first time or replayed; one
// with a body gets the type net/http would have sniffed.
func TestSniffOnlyBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		if r.URL.Path == "/body" {
			_, _ = io.WriteString(w, "<html>hi</html>")
		}
	}))
	for _, key := range []string{"k1", "k1"} {
		if r := b.do(http.MethodPost, "/empty", key, `{}`); r.Status != http.StatusCreated || r.Header.Get("Content-Type") != "" {
			t.Fatalf("empty answer: %d with Content-Type %q, want none", r.Status, r.Header.Get("Content-Type"))
		}
	}
	for _, key := range []string{"k2", "k2"} {
		if r := b.do(http.MethodPost, "/body", key, `{}`); r.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("HTML answer: Content-Type %q, want the sniffed text/html", r.Header.Get("Content-Type"))
		}
	}
}

// A response streamed before the engine decides (its body is over MaxResponseBody) carries
// Idempotency-Expires when the engine's own Policy will keep its status: here a 500 under
// StoreServerErrors.
func TestStreamedExpiresFollowsTheEnginePolicy(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, idem.Options{Policy: idem.StoreServerErrors}, idemhttp.Options{ExpiresHeader: true, MaxResponseBody: 8, Scope: idemhttp.SingleCaller()},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "more than eight bytes")
		}))
	r := b.do(http.MethodPost, "/", "k", `{}`)
	if r.Status != http.StatusInternalServerError || r.Header.Get(idemhttp.ExpiresHeader) == "" {
		t.Fatalf("got %d %v: want a 500 with %s, which StoreServerErrors keeps", r.Status, r.Header, idemhttp.ExpiresHeader)
	}
}

// The Idempotency-Expires of a streamed response is the engine's clock plus its TTL, not the
// wall clock's.
func TestStreamedExpiresFromTheEngineClock(t *testing.T) {
	t.Parallel()
	const ahead = 48 * time.Hour
	b := setup(t, nil, idem.Options{TTL: time.Hour, Now: func() time.Time { return time.Now().Add(ahead) }},
		idemhttp.Options{ExpiresHeader: true, MaxResponseBody: 8, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "more than eight bytes")
		}))
	r := b.do(http.MethodPost, "/", "k", `{}`)
	exp, err := http.ParseTime(r.Header.Get(idemhttp.ExpiresHeader))
	if err != nil {
		t.Fatalf("%s %q: %v", idemhttp.ExpiresHeader, r.Header.Get(idemhttp.ExpiresHeader), err)
	}
	if want := time.Now().Add(ahead + time.Hour); exp.Before(want.Add(-time.Minute)) || exp.After(want.Add(time.Minute)) {
		t.Fatalf("%s %v, want about %v (the engine's clock + TTL)", idemhttp.ExpiresHeader, exp, want)
	}
}

// A response too large to keep, sent whole to a client that is still there, and then cut
// off by the handler (a reverse proxy aborts when the upstream's answer breaks off) is not
// whole: the claim is held as uncertain, never completed as if the answer had been sent.
func TestStreamedThenAbortedIsHeld(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	b := setup(t, nil, idem.Options{}, idemhttp.Options{MaxResponseBody: 8, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		_, _ = io.WriteString(w, "more than eight bytes")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	if r := b.do(http.MethodPost, "/", "k", `{}`); r.Err == nil {
		t.Fatalf("first answer %d %q ended cleanly; want it cut off", r.Status, r.Body)
	}
	r := b.do(http.MethodPost, "/", "k", `{}`)
	if r.Status != http.StatusConflict || problemType(t, r) != idemhttp.ProblemInFlight || ran.Load() != 1 {
		t.Fatalf("retry: %d %q after %d executions; want 409 %s (held) and one execution", r.Status, r.Body, ran.Load(), idemhttp.ProblemInFlight)
	}
}

// A response too large to keep whose client goes away while it streams, and that the handler
// then cuts off (a reverse proxy aborts when it cannot write to its client), is whole as far
// as idem keeps it: the record is completed with its status and without its body, and the
// retry gets ProblemNotRetained, not a claim held for ever.
func TestStreamedToAGoneClientIsCompleted(t *testing.T) {
	t.Parallel()
	var ran atomic.Int64
	b := setup(t, nil, idem.Options{}, idemhttp.Options{MaxResponseBody: 8, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		w.WriteHeader(http.StatusCreated)
		chunk := strings.Repeat("z", 64<<10)
		for range 16 << 10 { // up to 1 GiB: the client is gone long before
			if _, err := io.WriteString(w, chunk); err != nil {
				panic(http.ErrAbortHandler)
			}
			w.(http.Flusher).Flush()
		}
		t.Error("the writes never failed")
	}))
	c, err := net.Dial("tcp", b.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: t\r\nIdempotency-Key: k\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("first answer %d, want 201", resp.StatusCode)
	}
	c.Close() // gone mid-answer
	for deadline := time.Now().Add(20 * time.Second); len(b.outcomes()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first request never ended")
		}
	}
	r := b.do(http.MethodPost, "/", "k", `{}`)
	if r.Status != http.StatusCreated || r.Header.Get(idemhttp.ReplayedHeader) != "true" || problemType(t, r) != idemhttp.ProblemNotRetained || ran.Load() != 1 {
		t.Fatalf("retry: %d %q after %d executions; want a 201 %s replay and one execution", r.Status, r.Body, ran.Load(), idemhttp.ProblemNotRetained)
	}
	if outs := b.outcomes(); outs[0] != idemhttp.OutcomeOversize {
		t.Fatalf("outcomes %v, want oversize first", outs)
	}
}

func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80])
	}
	return string(b)
}
