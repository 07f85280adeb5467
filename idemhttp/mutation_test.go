package idemhttp_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/syncbuf"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
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

// DenyHeaders of every length are honoured, those of 63 and 64 bytes (either side of the
// lookup table's end) included.
func TestDenyHeadersAtTheTableEnd(t *testing.T) {
	t.Parallel()
	n63 := "X-" + strings.Repeat("a", 61)
	n64 := "X-" + strings.Repeat("b", 62)
	b := setup(t, nil, idem.Options{}, idemhttp.Options{DenyHeaders: []string{n63, n64}, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(n63, "secret")
		w.Header().Set(n64, "secret")
		w.Header().Set("X-Kept", "yes")
		_, _ = io.WriteString(w, "ok")
	}))
	b.do(http.MethodPost, "/", "k", `{}`)
	r := b.do(http.MethodPost, "/", "k", `{}`)
	if r.Header.Get("Idempotent-Replayed") != "true" || r.Header.Get("X-Kept") != "yes" || r.Header.Get(n63) != "" || r.Header.Get(n64) != "" {
		t.Fatalf("replay headers %v: want X-Kept and neither denied header", r.Header)
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

// A response buffer that grows is charged to the memory budget by what it grows, not by its
// new size and its old one together: a 1 MiB response written in 4 KiB pieces, its buffer
// doubling up to MaxResponseBody, holds 1 MiB of the budget (the request's buffer aside).
func TestResponseGrowthChargedOnce(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	budget := idemhttp.NewBudget(1 << 30)
	var held atomic.Int64
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Budget: budget, MaxResponseBody: size, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := strings.Repeat("g", 4<<10)
		for range size / len(chunk) {
			_, _ = io.WriteString(w, chunk)
		}
		held.Store(budget.InUse())
	}))
	if r := b.do(http.MethodPost, "/", "k", `{}`); r.Status != http.StatusOK || len(r.Body) != size {
		t.Fatalf("got %d, %d bytes", r.Status, len(r.Body))
	}
	if h := held.Load(); h < size || h > size+128<<10 {
		t.Fatalf("%d bytes of the budget held for a %d-byte response, want it and at most 128 KiB more", h, size)
	}
}

func clip(b []byte) string {
	if len(b) > 80 {
		return string(b[:80])
	}
	return string(b)
}

// HashScope of several values hashes all of them, joined by newlines: a scope made of an API
// key and an account is not the scope of the API key alone.
func TestHashScopeOfSeveralValues(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("sk_live_1\nacct_2"))
	if got := idemhttp.HashScope("sk_live_1", "acct_2"); got != hex.EncodeToString(sum[:]) || got == idemhttp.HashScope("sk_live_1") {
		t.Fatalf("HashScope(2 values) = %s, want the hex SHA-256 of both joined by a newline", got)
	}
	sum = sha256.Sum256(nil)
	if got := idemhttp.HashScope(); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("HashScope() = %s, want the hex SHA-256 of nothing", got)
	}
}

// ValidScope's ends: a scope of exactly MaxScopeLen bytes is valid, and a space, the first
// character after the control characters, is allowed (0x1f is not).
func TestValidScopeEnds(t *testing.T) {
	t.Parallel()
	if s := strings.Repeat("s", idemhttp.MaxScopeLen); !idemhttp.ValidScope(s) {
		t.Errorf("a scope of %d bytes is refused", len(s))
	}
	if !idemhttp.ValidScope("acme corp") || !idemhttp.ValidScope(" ") {
		t.Error("a scope with a space is refused")
	}
	if idemhttp.ValidScope("a\x1fb") || idemhttp.ValidScope("a\x7fb") {
		t.Error("a scope with 0x1f or DEL is accepted")
	}
}

// The Connection header's list is split at commas and each name trimmed of spaces and tabs on
// both sides; an empty element (",,", ", ,") names nothing. Every header it names is hop-by-hop
// and not stored; the others are.
func TestConnectionListTrimmed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd["Connection"] = []string{"X-Hop-A \t, \tX-Hop-B,,X-Hop-C, ,", "\tx-hop-d"}
		for _, k := range []string{"X-Hop-A", "X-Hop-B", "X-Hop-C", "X-Hop-D", "X-Kept"} {
			hd.Set(k, "1")
		}
		_, _ = io.WriteString(w, "ok")
	}))
	first := b.do(http.MethodPost, "/", "k", `{}`)
	r := b.do(http.MethodPost, "/", "k", `{}`)
	if first.Status != http.StatusOK || r.Status != http.StatusOK || r.Header.Get("Idempotent-Replayed") != "true" || r.Header.Get("X-Kept") != "1" {
		t.Fatalf("first %d, replay %d %v; want 200 and a replay with X-Kept", first.Status, r.Status, r.Header)
	}
	for _, k := range []string{"X-Hop-A", "X-Hop-B", "X-Hop-C", "X-Hop-D"} {
		if r.Header.Get(k) != "" {
			t.Errorf("%s, named in Connection, was stored: %v", k, r.Header)
		}
	}
}

// An event's Start is when the middleware received the request, and its Duration the time
// since: both set whenever OnEvent is.
func TestEventStartAndDuration(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(2 * time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	}))
	before := time.Now()
	b.do(http.MethodPost, "/", "k", `{}`)
	b.do(http.MethodGet, "/", "", "")
	after := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.events) != 2 {
		t.Fatalf("%d events, want 2", len(b.events))
	}
	for _, ev := range b.events {
		if ev.Start.Before(before) || ev.Start.After(after) || ev.Duration <= 0 || ev.Duration > after.Sub(before) {
			t.Errorf("%s event: Start %v, Duration %v; want the request's start, between %v and %v, and a positive duration", ev.Outcome, ev.Start, ev.Duration, before, after)
		}
	}
	if ev := b.events[0]; ev.Outcome != idemhttp.OutcomeExecuted || ev.Handler < 2*time.Millisecond || ev.Handler > ev.Duration {
		t.Errorf("executed event: %s, Handler %v, Duration %v; want the handler's time within the request's", ev.Outcome, ev.Handler, ev.Duration)
	}
}

// A panic before the handler began to answer goes on to the caller of ServeHTTP (http.Server
// logs it and closes the connection) once the middleware has answered 500 and reported the
// release with status 500; http.ErrAbortHandler goes on too, but with nothing answered and a
// status of 0.
func TestPanicBeforeAnswerGoesOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		value  any
		status int // the recorder's (200: nothing written) and the event's (0 then)
	}{
		{"panic", "boom", http.StatusInternalServerError},
		{"abort", http.ErrAbortHandler, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eng, err := idem.New(memstore.New(), idem.Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			var events []idemhttp.Event
			mw, err := idemhttp.New(idemhttp.Options{Runner: eng, Logger: quiet, OnEvent: func(ev idemhttp.Event) { events = append(events, ev) }, Scope: idemhttp.SingleCaller()})
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic(tc.value) }))
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", "k")
			got := func() (v any) {
				defer func() { v = recover() }()
				h.ServeHTTP(rec, req)
				return nil
			}()
			if got != tc.value {
				t.Fatalf("ServeHTTP recovered %v, want the handler's panic %v to go on", got, tc.value)
			}
			if want := max(tc.status, http.StatusOK); rec.Code != want || (tc.status == 0) != (rec.Body.Len() == 0) {
				t.Errorf("answered %d %q, want %d (a problem only for a panic)", rec.Code, rec.Body, want)
			}
			if len(events) != 1 || events[0].Outcome != idemhttp.OutcomeReleased || events[0].Status != tc.status || events[0].Key != "k" {
				t.Fatalf("events %+v, want one release with status %d", events, tc.status)
			}
		})
	}
}

// A request buffer that grows is charged to the memory budget by what it grows: a 1 MiB body
// of unknown length (chunked), its buffer doubling from 4 KiB, holds 1 MiB of the budget and
// little more (the response's buffer, up to 64 KiB when pooled, and at most 64 KiB of slack);
// a body of declared length grows its buffer to that length and one byte, no further.
func TestRequestGrowthChargedOnce(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	for _, tc := range []struct {
		name    string
		length  int64 // the request's ContentLength; -1: chunked
		atLeast int64
		atMost  int64
	}{
		{"chunked", -1, size, size + 128<<10},
		{"declared", 300 << 10, 300 << 10, 300<<10 + 128<<10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			budget := idemhttp.NewBudget(1 << 30)
			var held, got atomic.Int64
			b := setup(t, nil, idem.Options{}, idemhttp.Options{Budget: budget, MaxRequestBody: size, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := io.Copy(io.Discard, r.Body)
				got.Store(n)
				held.Store(budget.InUse())
			}))
			body := strings.Repeat("r", size)
			if tc.length > 0 {
				body = body[:tc.length]
			}
			req, err := http.NewRequest(http.MethodPost, b.srv.URL, struct{ io.Reader }{strings.NewReader(body)}) // no length: chunked
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tc.length
			req.Header.Set("Idempotency-Key", "k")
			resp, err := b.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || got.Load() != int64(len(body)) {
				t.Fatalf("got %d, the handler read %d bytes; want 200 and all %d", resp.StatusCode, got.Load(), len(body))
			}
			if h := held.Load(); h < tc.atLeast || h > tc.atMost {
				t.Fatalf("%d bytes of the budget held for a %d-byte body, want %d to %d", h, len(body), tc.atLeast, tc.atMost)
			}
		})
	}
}

// scriptedBody is a request body that checks how it is read: it hands out data in pieces of
// at most 1000 bytes, returns (0, nil) first when stall is set, then tail once data is out
// (after open closes, if set: a stream its client keeps open), and fails a Read with an empty buffer (which could never make progress).
type scriptedBody struct {
	data  []byte
	stall bool
	open  <-chan struct{} // if set, a Read once data is out waits for it to close
	tail  error
}

var (
	errEmptyRead = errors.New("Read with an empty buffer")
	errPastEnd   = errors.New("Read past the declared length")
)

func (b *scriptedBody) Read(p []byte) (int, error) {
	switch {
	case len(p) == 0:
		return 0, errEmptyRead
	case b.stall:
		b.stall = false
		return 0, nil
	case len(b.data) == 0:
		if b.open != nil {
			<-b.open
		}
		return 0, b.tail
	}
	n := copy(p[:min(len(p), 1000)], b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *scriptedBody) Close() error { return nil }

// The middleware reads a request body to its declared length and not past it (a client may
// keep the stream open after its last byte), to EOF when the length is unknown or 0 (as
// net/http's client reads a 0 with a body), across a Read that returns nothing, and a body of
// exactly MaxRequestBody bytes is accepted, either way, without ever reading into an empty
// buffer.
func TestRequestBodyReadToItsEnd(t *testing.T) {
	t.Parallel()
	const limit = 10_000
	full := []byte(strings.Repeat("q", limit))
	open := make(chan struct{})
	t.Cleanup(func() { close(open) }) // after the subtests
	for _, tc := range []struct {
		name   string
		length int64
		body   scriptedBody
		status int
	}{
		{"declared, the limit", limit, scriptedBody{data: full, tail: errPastEnd}, http.StatusOK},
		{"declared, short", 2, scriptedBody{data: []byte("{}"), tail: errPastEnd}, http.StatusOK},
		{"declared, the stream left open", 2, scriptedBody{data: []byte("{}"), open: open, tail: io.EOF}, http.StatusOK},
		{"unknown, the limit", -1, scriptedBody{data: full, tail: io.EOF}, http.StatusOK},
		{"unknown, stalled first", -1, scriptedBody{data: []byte("{}"), stall: true, tail: io.EOF}, http.StatusOK},
		{"zero, with a body", 0, scriptedBody{data: []byte("{}"), stall: true, tail: io.EOF}, http.StatusOK},
		{"unknown, past the limit", -1, scriptedBody{data: append(full, 'q'), tail: io.EOF}, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eng, err := idem.New(memstore.New(), idem.Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			mw, err := idemhttp.New(idemhttp.Options{Runner: eng, Logger: quiet, MaxRequestBody: limit, Scope: idemhttp.SingleCaller()})
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got, _ = io.ReadAll(r.Body)
			}))
			want := string(tc.body.data)
			req := httptest.NewRequest(http.MethodPost, "/", nil)
			req.Body, req.ContentLength = &tc.body, tc.length
			req.Header.Set("Idempotency-Key", "k")
			rec := httptest.NewRecorder()
			done := make(chan struct{})
			go func() {
				defer close(done)
				h.ServeHTTP(rec, req)
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the middleware still reads the body 10s after its declared length arrived")
			}
			if rec.Code != tc.status {
				t.Fatalf("got %d %q, want %d", rec.Code, rec.Body, tc.status)
			}
			if tc.status == http.StatusOK && string(got) != want {
				t.Fatalf("the handler read %d bytes, want all %d", len(got), len(want))
			}
		})
	}
}

// runnerFunc is an idem.Runner whose Do is the function itself.
type runnerFunc func(ctx context.Context, key, fingerprint string, fn idem.Func) (idem.Result, error)

func (f runnerFunc) Do(ctx context.Context, key, fingerprint string, fn idem.Func) (idem.Result, error) {
	return f(ctx, key, fingerprint, fn)
}

func (f runnerFunc) Options() idem.Options { return idem.Options{} }

// serveOnce sends one keyed POST with context ctx through the middleware over runner r
// (logging to log, if set) to a handler that answers 201 "made", and returns the answer and
// the events.
func serveOnce(t *testing.T, ctx context.Context, r idem.Runner, log *slog.Logger) (*httptest.ResponseRecorder, []idemhttp.Event) {
	t.Helper()
	var events []idemhttp.Event
	mw, err := idemhttp.New(idemhttp.Options{Runner: r, Logger: cmp.Or(log, quiet), OnEvent: func(ev idemhttp.Event) { events = append(events, ev) }, Scope: idemhttp.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "k")
	rec := httptest.NewRecorder()
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "made")
	})).ServeHTTP(rec, req)
	return rec, events
}

// The 409 of a request in flight has a Retry-After of the runner's estimate in whole seconds,
// rounded up, and 1 when the error carries none.
func TestInFlightRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&idem.InFlightError{Key: "k", RetryAfter: 3 * time.Second}, "3"},
		{&idem.InFlightError{Key: "k", RetryAfter: 1500 * time.Millisecond}, "2"},
		{&idem.InFlightError{Key: "k", RetryAfter: 41*time.Second + time.Nanosecond}, "42"},
		{&idem.InFlightError{Key: "k"}, "1"},
		{fmt.Errorf("wrapped: %w", idem.ErrInFlight), "1"},
	} {
		rec, events := serveOnce(t, context.Background(), runnerFunc(func(context.Context, string, string, idem.Func) (idem.Result, error) {
			return idem.Result{}, tc.err
		}), nil)
		if rec.Code != http.StatusConflict || rec.Header().Get("Retry-After") != tc.want {
			t.Errorf("%v: got %d, Retry-After %q; want 409, %s", tc.err, rec.Code, rec.Header().Get("Retry-After"), tc.want)
		}
		if len(events) != 1 || events[0].Outcome != idemhttp.OutcomeInFlight {
			t.Errorf("%v: events %+v, want one conflict", tc.err, events)
		}
	}
}

// When the handler ran but its result could not be recorded, the client has its answer and
// the event carries the runner's error (a conflict until the lease runs out follows); when it
// was recorded, the event has no error.
func TestUnrecordedResultInTheEvent(t *testing.T) {
	t.Parallel()
	storeErr := &idem.StoreError{Op: "complete", Err: errors.New("connection lost")}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"store error", storeErr},
		{"lease lost", idem.ErrLeaseLost},
		{"recorded", nil},
	} {
		var logs bytes.Buffer
		rec, events := serveOnce(t, context.Background(), runnerFunc(func(ctx context.Context, _, _ string, fn idem.Func) (idem.Result, error) {
			resp, err := fn(ctx)
			return idem.Result{Response: resp, Executed: true, Kept: tc.err == nil}, cmp.Or(err, tc.err)
		}), slog.New(slog.NewTextHandler(&logs, nil)))
		if rec.Code != http.StatusCreated || rec.Body.String() != "made" {
			t.Errorf("%s: got %d %q, want the handler's 201", tc.name, rec.Code, rec.Body)
		}
		if len(events) != 1 || events[0].Outcome != idemhttp.OutcomeExecuted || events[0].Err != tc.err {
			t.Fatalf("%s: events %+v, want one executed event with error %v", tc.name, events, tc.err)
		}
		if warned := strings.Contains(logs.String(), "result was not stored"); warned != (tc.err != nil) {
			t.Errorf("%s: logs %q; want a warning that the result was not stored only on an error", tc.name, logs.String())
		}
	}
}

// A panic after the handler began to answer is logged as an error with the panic's value and
// the stack where it began; http.ErrAbortHandler (a reverse proxy's upstream cut off) is
// logged as a warning, without a stack.
func TestAbortAfterAnswerLogged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		value any
		want  []string
		not   []string
	}{
		{"panic", "boom-value", []string{"level=ERROR", "panicked after it began to answer", "panic=boom-value", "stack=", "TestAbortAfterAnswerLogged"}, []string{"level=WARN"}},
		{"abort", http.ErrAbortHandler, []string{"level=WARN", "aborted after it began to answer"}, []string{"level=ERROR", "stack="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs syncbuf.Buffer
			b := setup(t, nil, idem.Options{}, idemhttp.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "partial")
				panic(tc.value)
			}))
			if r := b.do(http.MethodPost, "/", "k", `{}`); r.Err == nil {
				t.Fatalf("got %d %q, want the answer cut off", r.Status, r.Body)
			}
			var got string
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if got = logs.String(); strings.Contains(got, "after it began to answer") {
					break
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("logs lack %q:\n%s", w, got)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(got, w) {
					t.Errorf("logs have %q:\n%s", w, got)
				}
			}
		})
	}
}

// An error the middleware does not expect from its runner is answered 500 and logged as an
// error, unless the client went away (the error is then its context's, and nothing was done).
func TestUnexpectedRunnerErrorLogged(t *testing.T) {
	t.Parallel()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		logged bool
	}{
		{"client there", context.Background(), true},
		{"client gone", gone, false},
	} {
		var logs bytes.Buffer
		rec, events := serveOnce(t, tc.ctx, runnerFunc(func(ctx context.Context, _, _ string, _ idem.Func) (idem.Result, error) {
			return idem.Result{}, cmp.Or(ctx.Err(), errors.New("runner confused"))
		}), slog.New(slog.NewTextHandler(&logs, nil)))
		if rec.Code != http.StatusInternalServerError || len(events) != 1 || events[0].Outcome != idemhttp.OutcomeError || events[0].Err == nil {
			t.Errorf("%s: got %d, events %+v; want 500 and one error event with its error", tc.name, rec.Code, events)
		}
		if logged := strings.Contains(logs.String(), "level=ERROR") && strings.Contains(logs.String(), "unexpected engine error"); logged != tc.logged {
			t.Errorf("%s: logs %q; want the unexpected error logged: %v", tc.name, logs.String(), tc.logged)
		}
	}
}
