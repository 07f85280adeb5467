package idemhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/storehook"
	"github.com/idemkit/idem/store/memstore"
)

// stripeShape is an API's own error envelope, as Stripe's clients expect it.
func stripeShape(p idemhttp.Problem) (string, []byte) {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"type": "idempotency_error", "code": p.Code(), "message": p.Title, "status": p.Status}})
	return "application/json", b
}

// TestFormatProblem: with Options.FormatProblem every refusal — 400, 409, 413, 422, 503 and
// the replay of a response that was not retained — comes in the API's shape, with the
// middleware's status and Retry-After.
func TestFormatProblem(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	st := storehook.Wrap(memstore.New(), storehook.Hooks{Before: func(context.Context, storehook.Op) error {
		if down.Load() {
			return errors.New("store down (test)")
		}
		return nil
	}})
	release, started := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the server's Close, which waits for handlers
	b := setup(t, st, idem.Options{StoreTimeout: 200 * time.Millisecond},
		idemhttp.Options{Scope: idemhttp.SingleCaller(), RequireKey: true, MaxRequestBody: 16, MaxResponseBody: 8, FormatProblem: stripeShape},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				started <- struct{}{}
				<-release
			}
			w.WriteHeader(201)
			if r.URL.Path == "/big" {
				w.Write([]byte("more than eight bytes"))
			}
		}))

	check := func(name string, r reply, status int, code string) {
		t.Helper()
		var env struct {
			Error struct {
				Type, Code, Message string
				Status              int
			}
		}
		if r.Status != status || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s, want %d application/json", name, r.Status, r.Header.Get("Content-Type"), status)
		}
		if err := json.Unmarshal(r.Body, &env); err != nil || env.Error.Type != "idempotency_error" ||
			env.Error.Code != code || env.Error.Status != status || env.Error.Message == "" {
			t.Errorf("%s: body %s (%v), want code %s", name, r.Body, err, code)
		}
		if r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no X-Content-Type-Options", name)
		}
	}
	check("missing key", b.do("POST", "/", "", "x"), 400, "missing-key")
	check("invalid key", b.do("POST", "/", "bad\tkey", "x"), 400, "invalid-key")
	check("too large", b.do("POST", "/", "k-large", strings.Repeat("x", 17)), 413, "request-too-large")

	if r := b.do("POST", "/", "k1", "one"); r.Status != 201 {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	check("mismatch", b.do("POST", "/", "k1", "two"), 422, "mismatch")

	done := make(chan reply, 1)
	go func() { done <- b.do("POST", "/slow", "k-slow", "x") }()
	<-started // the first holds the key
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := b.do("POST", "/slow", "k-slow", "x")
		if r.Status == 409 {
			check("in flight", r, 409, "in-flight")
			if r.Header.Get("Retry-After") == "" {
				t.Error("in flight: no Retry-After")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 409 while the first is running: %d %s", r.Status, r.Body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	once.Do(func() { close(release) })
	<-done

	if r := b.do("POST", "/big", "k-big", "x"); r.Status != 201 {
		t.Fatalf("big first: %d", r.Status)
	}
	r := b.do("POST", "/big", "k-big", "x")
	check("not retained", r, 201, "response-not-retained")
	if r.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Error("not retained: not marked replayed")
	}

	down.Store(true)
	r = b.do("POST", "/", "k-down", "x")
	check("store down", r, 503, "store-unavailable")
	if r.Header.Get("Retry-After") == "" {
		t.Error("store down: no Retry-After")
	}
}

// TestFormatProblemNoContentType: a formatter that returns no media type is refused when the
// middleware is made.
func TestFormatProblemNoContentType(t *testing.T) {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = idemhttp.New(idemhttp.Options{Runner: eng, Scope: idemhttp.SingleCaller(),
		FormatProblem: func(idemhttp.Problem) (string, []byte) { return "", []byte("x") }})
	if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), "FormatProblem") {
		t.Fatalf("err %v, want ErrInvalidInput naming FormatProblem", err)
	}
}

func TestProblemCode(t *testing.T) {
	for typ, want := range map[string]string{idemhttp.ProblemInFlight: "in-flight", idemhttp.ProblemMismatch: "mismatch", "plain": "plain"} {
		if got := (idemhttp.Problem{Type: typ}).Code(); got != want {
			t.Errorf("Code(%q) = %q, want %q", typ, got, want)
		}
	}
}
