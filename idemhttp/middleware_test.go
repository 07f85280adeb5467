package idemhttp_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/syncbuf"
	"github.com/idemkit/idem/store/memstore"
)

// charge is a payments-like handler: it counts its effects and answers 201 with JSON.
type charge struct{ n atomic.Int64 }

func (c *charge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	n := c.n.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/charges/ch_"+strconv.FormatInt(n, 10))
	w.Header().Add("X-Multi", "a")
	w.Header().Add("X-Multi", "b")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"ch_%d","request":%q}`, n, body)
}

// The seed scenario: the same POST twice → byte-identical answers and one effect; another body
// with that key → 422 and still one effect.
func TestSeedScenario(t *testing.T) {
	t.Parallel()
	h := &charge{}
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, h)
	first := b.do("POST", "/v1/charges", "order-1001", `{"amount":1000}`)
	if first.Status != 201 || first.Header.Get(idemhttp.ReplayedHeader) != "" {
		t.Fatalf("first: %d %v", first.Status, first.Header)
	}
	second := b.do("POST", "/v1/charges", "order-1001", `{"amount":1000}`)
	if second.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("second not marked replayed: %v", second.Header)
	}
	sameReply(t, first, second)
	if h.n.Load() != 1 {
		t.Fatalf("%d effects, want 1", h.n.Load())
	}
	third := b.do("POST", "/v1/charges", "order-1001", `{"amount":9999}`)
	if third.Status != 422 || problemType(t, third) != idemhttp.ProblemMismatch {
		t.Fatalf("other body: %d %s", third.Status, third.Body)
	}
	// Same body, another path: also a mismatch (the key is per client, not per route).
	fourth := b.do("POST", "/v1/refunds", "order-1001", `{"amount":1000}`)
	if fourth.Status != 422 {
		t.Fatalf("other path: %d %s", fourth.Status, fourth.Body)
	}
	if h.n.Load() != 1 {
		t.Fatalf("%d effects after mismatch, want 1", h.n.Load())
	}
	want := []idemhttp.Outcome{idemhttp.OutcomeExecuted, idemhttp.OutcomeReplay, idemhttp.OutcomeMismatch, idemhttp.OutcomeMismatch}
	if got := b.outcomes(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// 200 concurrent requests with one key against a slow handler: one execution; every 2xx
// identical, the rest 409 with Retry-After.
func TestConcurrentSameKey(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		time.Sleep(200 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"n":%d}`, n.Load())
	})
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, slow)
	const N = 200
	replies := make([]reply, N)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range N {
		wg.Go(func() {
			<-start
			replies[i] = b.do("POST", "/pay", "same-key", `{"amount":5}`)
		})
	}
	close(start)
	wg.Wait()
	if n.Load() != 1 {
		t.Fatalf("%d executions, want 1", n.Load())
	}
	var ok []reply
	conflicts := 0
	for _, r := range replies {
		switch {
		case r.Err != nil:
			t.Fatal(r.Err)
		case r.Status == 201:
			ok = append(ok, r)
		case r.Status == 409:
			conflicts++
			if problemType(t, r) != idemhttp.ProblemInFlight || r.Header.Get("Retry-After") == "" {
				t.Fatalf("409 without in-flight problem or Retry-After: %v %s", r.Header, r.Body)
			}
		default:
			t.Fatalf("unexpected %d %s", r.Status, r.Body)
		}
	}
	if len(ok) == 0 {
		t.Fatal("no 2xx")
	}
	for _, r := range ok[1:] {
		sameReply(t, ok[0], r)
	}
	t.Logf("%d × 201 (identical), %d × 409", len(ok), conflicts)
}

// With Options.Wait, in-flight duplicates wait and replay: every answer is the one response.
func TestConcurrentWait(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		time.Sleep(100 * time.Millisecond)
		io.WriteString(w, "done")
	})
	b := setup(t, nil, idem.Options{Wait: 10 * time.Second}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, slow)
	var wg sync.WaitGroup
	replies := make([]reply, 50)
	for i := range replies {
		wg.Go(func() { replies[i] = b.do("POST", "/x", "k", "b") })
	}
	wg.Wait()
	for _, r := range replies {
		if r.Status != 200 || string(r.Body) != "done" {
			t.Fatalf("%d %q", r.Status, r.Body)
		}
	}
	if n.Load() != 1 {
		t.Fatalf("%d executions", n.Load())
	}
}

// A handler that panics: the client gets a 500 problem (before anything was sent) or a
// cut-off response (after), never a success; the claim is released so a retry executes.
// A panic before the handler began to answer releases the key (a clean 500, and the retry
// executes). Once it began to answer, the effect may have happened: a later panic or abort
// never releases; the client's answer is cut off and the retry gets 409 (held as uncertain).
func TestHandlerPanics(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		h     func(w http.ResponseWriter)
		begun bool
	}{
		{"before writing", func(w http.ResponseWriter) { panic("boom") }, false},
		{"after buffering a success", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "2")
			w.WriteHeader(200)
			io.WriteString(w, "ok")
			panic("boom")
		}, true},
		{"after writing the status only", func(w http.ResponseWriter) {
			w.WriteHeader(201)
			panic("boom")
		}, true},
		{"after flushing", func(w http.ResponseWriter) {
			// A flush sends nothing before the response is stored, so the client never
			// holds a partial success.
			w.WriteHeader(200)
			io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			panic("boom")
		}, true},
		{"abort handler", func(w http.ResponseWriter) {
			io.WriteString(w, "partial")
			panic(http.ErrAbortHandler)
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) == 1 {
					tc.h(w)
				}
				io.WriteString(w, "second")
			})
			b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, h)
			r := b.do("POST", "/p", "k1", "x")
			if !tc.begun {
				if r.Status != 500 || problemType(t, r) != idemhttp.ProblemHandlerPanic {
					t.Fatalf("got %d %q err=%v", r.Status, r.Body, r.Err)
				}
				// Released: the retry executes.
				r = b.do("POST", "/p", "k1", "x")
				if r.Status != 200 || string(r.Body) != "second" || n.Load() != 2 {
					t.Fatalf("retry: %d %q, %d executions", r.Status, r.Body, n.Load())
				}
				return
			}
			if r.Err == nil {
				t.Fatalf("a panic after the handler began to answer must cut the answer off; got %d %q", r.Status, r.Body)
			}
			// Held: the retry does not execute.
			r = b.do("POST", "/p", "k1", "x")
			if r.Status != 409 || problemType(t, r) != idemhttp.ProblemInFlight || n.Load() != 1 {
				t.Fatalf("retry: %d %q, %d executions; want 409 and 1 execution", r.Status, r.Body, n.Load())
			}
		})
	}
}

// A 500 releases the key (a retry executes); with idem.StoreServerErrors it is replayed.
func TestServerErrorPolicy(t *testing.T) {
	t.Parallel()
	for _, store5xx := range []bool{false, true} {
		t.Run(fmt.Sprint("store5xx=", store5xx), func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				http.Error(w, "db down", 500)
			})
			eo := idem.Options{}
			if store5xx {
				eo.Policy = idem.StoreServerErrors
			}
			b := setup(t, nil, eo, idemhttp.Options{Scope: idemhttp.SingleCaller()}, h)
			r1 := b.do("POST", "/p", "k", "x")
			r2 := b.do("POST", "/p", "k", "x")
			if r1.Status != 500 || r2.Status != 500 {
				t.Fatalf("%d %d", r1.Status, r2.Status)
			}
			want := int64(2)
			if store5xx {
				want = 1
				sameReply(t, r1, r2)
				if r2.Header.Get(idemhttp.ReplayedHeader) != "true" {
					t.Fatal("not replayed")
				}
			}
			if n.Load() != want {
				t.Fatalf("%d executions, want %d", n.Load(), want)
			}
		})
	}
}

// A handler streaming 5 MiB: the client gets all of it as it is written; the record is kept
// without the body, so a retry gets "not retained" and never a second execution.
func TestStreamingLargeResponse(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	chunk := strings.Repeat("0123456789abcdef", 4096) // 64 KiB
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Location", "/exports/1")
		w.WriteHeader(201)
		for range 80 {
			io.WriteString(w, chunk)
			http.NewResponseController(w).Flush()
		}
	})
	b := setup(t, nil, idem.Options{}, idemhttp.Options{ExpiresHeader: true, Scope: idemhttp.SingleCaller()}, h)
	r1 := b.do("POST", "/export", "big", "x")
	if r1.Err != nil || r1.Status != 201 || len(r1.Body) != 80*len(chunk) || string(r1.Body[:16]) != chunk[:16] {
		t.Fatalf("first: %d, %d bytes, %v", r1.Status, len(r1.Body), r1.Err)
	}
	r2 := b.do("POST", "/export", "big", "x")
	if r2.Status != 201 || problemType(t, r2) != idemhttp.ProblemNotRetained ||
		r2.Header.Get(idemhttp.ReplayedHeader) != "true" || r2.Header.Get("Location") != "/exports/1" {
		t.Fatalf("retry: %d %v %s", r2.Status, r2.Header, r2.Body)
	}
	if r2.Header.Get(idemhttp.ExpiresHeader) == "" {
		t.Fatal("no expiry header on the not-retained replay")
	}
	if n.Load() != 1 {
		t.Fatalf("%d executions", n.Load())
	}
	if got := b.outcomes(); fmt.Sprint(got) != "[oversize replay]" {
		t.Fatalf("events %v", got)
	}
}

// A body just under the limit is kept; one byte over is not.
func TestResponseLimitBoundary(t *testing.T) {
	t.Parallel()
	for _, size := range []int{1000, 1001} {
		var n atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			for range size {
				w.Write([]byte{'x'})
			}
		})
		b := setup(t, nil, idem.Options{}, idemhttp.Options{MaxResponseBody: 1000, Scope: idemhttp.SingleCaller()}, h)
		r1 := b.do("POST", "/", "k", "")
		r2 := b.do("POST", "/", "k", "")
		if len(r1.Body) != size || n.Load() != 1 {
			t.Fatalf("size %d: first got %d bytes, %d executions", size, len(r1.Body), n.Load())
		}
		if size <= 1000 {
			sameReply(t, r1, r2)
		} else if problemType(t, r2) != idemhttp.ProblemNotRetained {
			t.Fatal("not-retained expected")
		}
	}
}

// A handler that never writes answers 200 with no body, and so does its replay.
func TestHandlerNeverWrites(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
	r1 := b.do("POST", "/", "k", "x")
	r2 := b.do("POST", "/", "k", "x")
	if r1.Status != 200 || len(r1.Body) != 0 || r2.Status != 200 || len(r2.Body) != 0 || r2.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("%+v %+v", r1, r2)
	}
	sameReply(t, r1, r2)
	if n.Load() != 1 {
		t.Fatalf("%d executions", n.Load())
	}
}

// Late WriteHeader, many small writes, flushes, headers set after WriteHeader.
func TestCaptureShapes(t *testing.T) {
	t.Parallel()
	cases := map[string]http.HandlerFunc{
		"late header": func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(10 * time.Millisecond)
			w.Header().Set("X-A", "1")
			w.WriteHeader(202)
			w.WriteHeader(500) // superfluous: ignored
			io.WriteString(w, "late")
		},
		"small pieces": func(w http.ResponseWriter, r *http.Request) {
			for i := range 3000 {
				fmt.Fprint(w, i%10)
			}
		},
		"flusher": func(w http.ResponseWriter, r *http.Request) {
			for i := range 5 {
				fmt.Fprintf(w, "event %d\n", i)
				w.(http.Flusher).Flush()
			}
		},
		"response controller": func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
				panic(err)
			}
			io.WriteString(w, "a")
			if err := rc.Flush(); err != nil {
				panic(err)
			}
			io.WriteString(w, "b")
		},
		"informational": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(103)
			w.WriteHeader(201)
			io.WriteString(w, "created")
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				h(w, r)
			}))
			r1 := b.do("POST", "/", "k", "x")
			r2 := b.do("POST", "/", "k", "x")
			if r1.Err != nil || r2.Err != nil {
				t.Fatal(r1.Err, r2.Err)
			}
			sameReply(t, r1, r2)
			if n.Load() != 1 {
				t.Fatalf("%d executions", n.Load())
			}
		})
	}
}

// Hijack is refused under capture, through the interface and through ResponseController.
func TestHijackRefused(t *testing.T) {
	t.Parallel()
	errs := make(chan error, 2)
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _, err := w.(http.Hijacker).Hijack()
		errs <- err
		_, _, err = http.NewResponseController(w).Hijack()
		errs <- err
		w.WriteHeader(400)
	}))
	b.do("POST", "/", "k", "x")
	for range 2 {
		if err := <-errs; !errors.Is(err, idemhttp.ErrHijackNotSupported) {
			t.Fatalf("Hijack: %v", err)
		}
	}
}

// Hop-by-hop and denied headers are not stored; the others are, in order.
func TestStoredHeaders(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Connection", "X-Private")
		hd.Set("X-Private", "secret")
		hd.Set("Keep-Alive", "timeout=5")
		hd.Set("Set-Cookie", "session=1")
		hd.Set("X-Internal", "no")
		hd.Add("Vary", "Accept")
		hd.Add("Vary", "Origin")
		hd.Set("Content-Type", "text/plain")
		io.WriteString(w, "hi")
	})
	b := setup(t, nil, idem.Options{}, idemhttp.Options{DenyHeaders: []string{"Set-Cookie", "x-internal"}, Scope: idemhttp.SingleCaller()}, h)
	b.do("POST", "/", "k", "x")
	r := b.do("POST", "/", "k", "x")
	for _, k := range []string{"X-Private", "Keep-Alive", "Set-Cookie", "X-Internal"} {
		if r.Header.Get(k) != "" {
			t.Errorf("%s replayed: %v", k, r.Header)
		}
	}
	if strings.Join(r.Header["Vary"], ",") != "Accept,Origin" || r.Header.Get("Content-Type") != "text/plain" {
		t.Errorf("stored headers lost: %v", r.Header)
	}
}

// Key parsing and routing: invalid → 400, missing → pass through or 400, other methods pass.
func TestKeyHandling(t *testing.T) {
	t.Parallel()
	h := &charge{}
	opt := idemhttp.Options{Scope: idemhttp.SingleCaller()}
	b := setup(t, nil, idem.Options{}, opt, h)
	req := setup(t, nil, idem.Options{}, idemhttp.Options{RequireKey: true, Scope: idemhttp.SingleCaller()}, h)

	if r := b.do("POST", "/", "", "x"); r.Status != 201 || r.Header.Get(idemhttp.ReplayedHeader) != "" {
		t.Fatalf("optional, no key: %d", r.Status)
	}
	if r := req.do("POST", "/", "", "x"); r.Status != 400 || problemType(t, r) != idemhttp.ProblemMissingKey {
		t.Fatalf("required, no key: %d %s", r.Status, r.Body)
	}
	if r := req.do("GET", "/", "", ""); r.Status != 201 {
		t.Fatalf("GET must pass through: %d", r.Status)
	}
	for _, bad := range []string{`"unterminated`, `"a";p=1`, strings.Repeat("k", 256), "ke\ty", "kéy", `""`} {
		if r := b.do("POST", "/", bad, "x"); r.Status != 400 || problemType(t, r) != idemhttp.ProblemInvalidKey {
			t.Fatalf("key %q: %d %s", bad, r.Status, r.Body)
		}
	}
	// Sent twice, on two lines or as a list on one line (what a proxy makes of two lines): a
	// key is one structured-field string, so both are 400 and the handler does not run.
	before := h.n.Load()
	if r := b.do("POST", "/", "", "x", "Idempotency-Key", "a", "Idempotency-Key", "b"); r.Status != 400 {
		t.Fatalf("two keys: %d", r.Status)
	}
	for _, list := range []string{"a, b", "a,b", `"a", "b"`} {
		if r := b.do("POST", "/", list, "x"); r.Status != 400 || problemType(t, r) != idemhttp.ProblemInvalidKey {
			t.Fatalf("two keys on one line (%s): %d %s", list, r.Status, r.Body)
		}
	}
	if h.n.Load() != before {
		t.Fatalf("a request with two keys ran the handler")
	}
	// A quoted key and its bare form are the same key.
	before = h.n.Load()
	r1 := b.do("POST", "/", `"abc-123"`, "x")
	r2 := b.do("POST", "/", `abc-123`, "x")
	sameReply(t, r1, r2)
	if h.n.Load() != before+1 {
		t.Fatal("quoted and bare keys differ")
	}
}

// Tenants with the same key never see each other's records.
func TestScopesAreApart(t *testing.T) {
	t.Parallel()
	h := &charge{}
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.HeaderScope("X-API-Key")}, h)
	a1 := b.do("POST", "/", "k", "x", "X-API-Key", "tenant-a")
	b1 := b.do("POST", "/", "k", "x", "X-API-Key", "tenant-b")
	if h.n.Load() != 2 || string(a1.Body) == string(b1.Body) {
		t.Fatalf("tenants shared a record: %s %s", a1.Body, b1.Body)
	}
	// Tenant b's other body is not a mismatch against tenant a's record.
	if r := b.do("POST", "/", "k2", "y", "X-API-Key", "tenant-a"); r.Status != 201 {
		t.Fatal(r.Status)
	}
	if r := b.do("POST", "/", "k2", "z", "X-API-Key", "tenant-b"); r.Status != 201 {
		t.Fatalf("tenant b blocked by tenant a: %d", r.Status)
	}
	a2 := b.do("POST", "/", "k", "x", "X-API-Key", "tenant-a")
	sameReply(t, a1, a2)
	// No secret in the store: the storage key holds the hash.
	if _, err := b.store.Get(context.Background(), idemhttp.StorageKey(idemhttp.HashScope("tenant-a"), "k")); err != nil {
		t.Fatal(err)
	}
	// A scope function that fails → 400.
	bad := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: func(*http.Request) (string, error) { return "a|b", nil }}, h)
	if r := bad.do("POST", "/", "k", "x"); r.Status != 400 || problemType(t, r) != idemhttp.ProblemInvalidScope {
		t.Fatalf("bad scope: %d", r.Status)
	}
}

// JSON fingerprints ignore member order, whitespace, number forms and ignored fields.
func TestJSONFingerprint(t *testing.T) {
	t.Parallel()
	h := &charge{}
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Fingerprint: idemhttp.JSONFingerprint("sent_at", "meta.trace"), Scope: idemhttp.SingleCaller()}, h)
	r1 := b.do("POST", "/", "k", `{"amount":1000,"currency":"eur","sent_at":"10:00","meta":{"trace":"a","x":1}}`)
	r2 := b.do("POST", "/", "k", `{ "currency" : "eur", "meta":{"x":1.0,"trace":"b"}, "amount":1e3, "sent_at":"10:01" }`)
	sameReply(t, r1, r2)
	if r := b.do("POST", "/", "k", `{"amount":1001,"currency":"eur"}`); r.Status != 422 {
		t.Fatalf("changed amount: %d", r.Status)
	}
	if h.n.Load() != 1 {
		t.Fatalf("%d executions", h.n.Load())
	}
}

// Webhooks: the key from another header, or from the JSON body.
func TestWebhookKeys(t *testing.T) {
	t.Parallel()
	h := &charge{}
	gh := setup(t, nil, idem.Options{}, idemhttp.Options{Key: idemhttp.HeaderKey("X-GitHub-Delivery"), RequireKey: true, Scope: idemhttp.SingleCaller()}, h)
	g1 := gh.do("POST", "/hook", "", `{"action":"opened"}`, "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	g2 := gh.do("POST", "/hook", "", `{"action":"opened"}`, "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	sameReply(t, g1, g2)

	st := setup(t, nil, idem.Options{}, idemhttp.Options{Key: idemhttp.JSONKey("id"), Scope: idemhttp.SingleCaller()}, h)
	s1 := st.do("POST", "/hook", "", `{"id":"evt_1","type":"charge.succeeded","created":1}`)
	s2 := st.do("POST", "/hook", "", `{"created":1,"type":"charge.succeeded","id":"evt_1"}`)
	if s1.Status != 201 || s2.Status != 422 { // raw fingerprint: reordered body is another request
		t.Fatalf("%d %d", s1.Status, s2.Status)
	}
	s3 := st.do("POST", "/hook", "", `{"id":"evt_1","type":"charge.succeeded","created":1}`)
	sameReply(t, s1, s3)
	// No id: passes through (the key is optional here) and the handler still reads the body.
	if r := st.do("POST", "/hook", "", `{"type":"ping"}`); r.Status != 201 || !strings.Contains(string(r.Body), "ping") {
		t.Fatalf("no id: %d %s", r.Status, r.Body)
	}
	if h.n.Load() != 3 {
		t.Fatalf("%d executions, want 3", h.n.Load())
	}
}

// A request body over the limit → 413, no effect; the handler reads the full body otherwise.
func TestRequestBodyLimit(t *testing.T) {
	t.Parallel()
	h := &charge{}
	b := setup(t, nil, idem.Options{}, idemhttp.Options{MaxRequestBody: 10, Scope: idemhttp.SingleCaller()}, h)
	if r := b.do("POST", "/", "k", "12345678901"); r.Status != 413 || problemType(t, r) != idemhttp.ProblemRequestTooLarge {
		t.Fatalf("%d", r.Status)
	}
	if r := b.do("POST", "/", "k", "1234567890"); r.Status != 201 || !strings.Contains(string(r.Body), "1234567890") {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if h.n.Load() != 1 {
		t.Fatal(h.n.Load())
	}
}

// Store failure: fail closed (503, Retry-After, no effect), or fail open when asked.
func TestStoreFailure(t *testing.T) {
	t.Parallel()
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprint("failopen=", open), func(t *testing.T) {
			t.Parallel()
			h := &charge{}
			st := memstore.New()
			b := setup(t, st, idem.Options{}, idemhttp.Options{FailOpen: open, StoreRetryAfter: 3 * time.Second, Scope: idemhttp.SingleCaller()}, h)
			st.Close()
			r := b.do("POST", "/", "k", "body")
			if !open {
				if r.Status != 503 || r.Header.Get("Retry-After") != "3" || problemType(t, r) != idemhttp.ProblemStoreUnavailable || h.n.Load() != 0 {
					t.Fatalf("%d %v %d effects", r.Status, r.Header, h.n.Load())
				}
				return
			}
			if r.Status != 201 || !strings.Contains(string(r.Body), "body") || h.n.Load() != 1 {
				t.Fatalf("fail open: %d %s", r.Status, r.Body)
			}
			if got := b.outcomes(); fmt.Sprint(got) != "[fail_open]" {
				t.Fatal(got)
			}
		})
	}
}

// The expiry header: on a kept first response (an estimate, not after the stored expiry) and
// on replays (exact); not on a released response.
func TestExpiresHeader(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, idem.Options{TTL: time.Hour}, idemhttp.Options{ExpiresHeader: true, Scope: idemhttp.SingleCaller()}, &charge{})
	r1 := b.do("POST", "/", "k", "x")
	r2 := b.do("POST", "/", "k", "x")
	e1, err1 := http.ParseTime(r1.Header.Get(idemhttp.ExpiresHeader))
	e2, err2 := http.ParseTime(r2.Header.Get(idemhttp.ExpiresHeader))
	if err1 != nil || err2 != nil || e1.After(e2) || time.Until(e2) > time.Hour || time.Until(e2) < 59*time.Minute {
		t.Fatalf("%v %v / %v %v", e1, err1, e2, err2)
	}
	rel := setup(t, nil, idem.Options{}, idemhttp.Options{ExpiresHeader: true, Scope: idemhttp.SingleCaller()}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	if r := rel.do("POST", "/", "k", "x"); r.Header.Get(idemhttp.ExpiresHeader) != "" {
		t.Fatal("expiry header on a released response")
	}
}

// MarkFailed releases whatever the status; MarkUncertain holds the claim.
func TestMarks(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		switch r.URL.Path {
		case "/failed":
			idemhttp.MarkFailed(w)
		case "/uncertain":
			idemhttp.MarkUncertain(w)
		}
		w.WriteHeader(200)
	})
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, h)
	b.do("POST", "/failed", "f", "")
	if r := b.do("POST", "/failed", "f", ""); r.Status != 200 || n.Load() != 2 {
		t.Fatalf("MarkFailed: %d, %d executions", r.Status, n.Load())
	}
	b.do("POST", "/uncertain", "u", "")
	if r := b.do("POST", "/uncertain", "u", ""); r.Status != 409 || n.Load() != 3 {
		t.Fatalf("MarkUncertain: %d, %d executions", r.Status, n.Load())
	}
	if idemhttp.MarkFailed(httptestRecorder{}) {
		t.Fatal("MarkFailed outside the middleware reported true")
	}
}

type httptestRecorder struct{ http.ResponseWriter }

// Options are validated with the field named.
func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	eng, _ := idem.New(memstore.New(), idem.Options{})
	for _, tc := range []struct {
		opt  idemhttp.Options
		want string
	}{
		{idemhttp.Options{Scope: idemhttp.SingleCaller()}, "Options.Runner"},
		{idemhttp.Options{Runner: eng, Methods: []string{"PO ST"}, Scope: idemhttp.SingleCaller()}, "Options.Methods"},
		{idemhttp.Options{Runner: eng, MaxRequestBody: -1, Scope: idemhttp.SingleCaller()}, "Options.MaxRequestBody"},
		{idemhttp.Options{Runner: eng, MaxResponseBody: -1, Scope: idemhttp.SingleCaller()}, "Options.MaxResponseBody"},
		{idemhttp.Options{Runner: eng, DenyHeaders: []string{"a b"}, Scope: idemhttp.SingleCaller()}, "Options.DenyHeaders"},
		{idemhttp.Options{Runner: eng, Key: idemhttp.JSONKey("a..b"), Scope: idemhttp.SingleCaller()}, "Options.Key"},
		{idemhttp.Options{Runner: eng, StoreRetryAfter: -time.Second, Scope: idemhttp.SingleCaller()}, "Options.StoreRetryAfter"},
		{idemhttp.Options{Runner: eng, MaxRetainedRequest: -1, Scope: idemhttp.SingleCaller()}, "Options.MaxRetainedRequest"},
		{idemhttp.Options{Runner: eng, MaxRetainedRequest: 63, Scope: idemhttp.SingleCaller()}, "Options.MaxRetainedRequest"},
		{idemhttp.Options{Runner: eng, RedactHeaders: []string{"a b"}, Scope: idemhttp.SingleCaller()}, "Options.RedactHeaders"},
	} {
		_, err := idemhttp.New(tc.opt)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %s", tc.opt, err, tc.want)
		}
	}
}

// Headers changed after a response is committed (its body outgrew MaxResponseBody) were never
// sent: the replay carries the headers as they were sent.
func TestHeaderChangedAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, idem.Options{}, idemhttp.Options{MaxResponseBody: 16, ExpiresHeader: true, Scope: idemhttp.SingleCaller()},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-A", "1")
			io.WriteString(w, strings.Repeat("a", 32)) // over the limit: sent now
			w.Header().Set("X-Late", "never sent")
			w.Header().Set("X-A", "2")
			io.WriteString(w, "more")
		}))
	r1 := b.do("POST", "/", "k", "x")
	r2 := b.do("POST", "/", "k", "x")
	if r1.Err != nil || r2.Err != nil {
		t.Fatal(r1.Err, r2.Err)
	}
	for i, r := range []reply{r1, r2} {
		if got := r.Header.Get("X-A"); got != "1" {
			t.Errorf("reply %d: X-A = %q, want 1", i+1, got)
		}
		if got := r.Header.Values("X-Late"); len(got) != 0 {
			t.Errorf("reply %d: X-Late = %q, want none", i+1, got)
		}
		if got := r.Header.Values(idemhttp.ExpiresHeader); len(got) != 1 {
			t.Errorf("reply %d: %s = %q, want one value", i+1, idemhttp.ExpiresHeader, got)
		}
	}
	if r2.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("second reply not replayed: %v", r2.Header)
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
			t.Errorf("%v: events %+v, want one in_flight", tc.err, events)
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
