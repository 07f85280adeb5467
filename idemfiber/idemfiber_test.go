package idemfiber_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfiber"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
	"github.com/valyala/fasthttp"
)

// bundle is a Fiber app on 127.0.0.1 with the middleware on /v1, and what it needs.
type bundle struct {
	t      *testing.T
	url    string
	store  *memstore.Store
	client *http.Client
	n      atomic.Int64 // handler runs
}

// setup serves h (which must count its runs in b.n) behind the middleware, with recover in
// front as an application would have it.
func setup(t *testing.T, eo idem.Options, o idemfiber.Options, h func(b *bundle) fiber.Handler) *bundle {
	t.Helper()
	b := &bundle{t: t, store: memstore.New(), client: &http.Client{Transport: &http.Transport{}}}
	eng, err := idem.New(b.store, eo)
	if err != nil {
		t.Fatal(err)
	}
	o.Runner = eng
	mw, err := idemfiber.New(o)
	if err != nil {
		t.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(recover.New())
	app.All("/v1/*", mw, h(b))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() {
		b.client.CloseIdleConnections()
		_ = app.ShutdownWithTimeout(5 * time.Second)
	})
	b.url = "http://" + ln.Addr().String()
	return b
}

// charge answers 201 with the request body and its run number, and a header of its own.
func charge(b *bundle) fiber.Handler {
	return func(c *fiber.Ctx) error {
		n := b.n.Add(1)
		c.Set("X-Charge", fmt.Sprint("ch_", n))
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(fiber.StatusCreated).SendString(fmt.Sprintf(`{"charge":%d,"request":%q}`, n, c.Body()))
	}
}

type answer struct {
	Status int
	Header http.Header
	Body   string
}

// do sends a request; hdr are name, value pairs (a name may repeat).
func (b *bundle) do(method, path, key, body string, hdr ...string) answer {
	b.t.Helper()
	req, err := http.NewRequest(method, b.url+path, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(idem.KeyHeader, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Error(err)
		return answer{}
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Error(err)
	}
	return answer{resp.StatusCode, resp.Header, string(rb)}
}

// problem checks that a is a problem+json answer with the status and type given.
func problem(t *testing.T, a answer, status int, typ string) {
	t.Helper()
	if a.Status != status || a.Header.Get("Content-Type") != idemhttp.ProblemContentType || !strings.Contains(a.Body, `"type":"`+typ+`"`) {
		t.Fatalf("got %d %q %s; want %d problem %s", a.Status, a.Header.Get("Content-Type"), a.Body, status, typ)
	}
}

// A retry gets the first answer byte for byte, its headers, and Idempotent-Replayed: true.
func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{}, idemfiber.Options{Scope: idemfiber.SingleCaller()}, charge)
	first := b.do("POST", "/v1/charges", "k1", `{"amount":1000}`)
	if first.Status != 201 || first.Header.Get(idemhttp.ReplayedHeader) != "" {
		t.Fatalf("first: %+v", first)
	}
	for range 2 {
		again := b.do("POST", "/v1/charges", `"k1"`, `{"amount":1000}`) // the structured-field form is the same key
		if again.Status != 201 || again.Body != first.Body || again.Header.Get(idemhttp.ReplayedHeader) != "true" ||
			again.Header.Get("X-Charge") != "ch_1" || again.Header.Get("Content-Type") != fiber.MIMEApplicationJSON {
			t.Fatalf("retry: %+v, first %+v", again, first)
		}
	}
	if n := b.n.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// The same key with another body, path or query is 422, and nothing runs.
func TestMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{}, idemfiber.Options{Scope: idemfiber.SingleCaller()}, charge)
	b.do("POST", "/v1/charges", "k", `{"amount":1000}`)
	problem(t, b.do("POST", "/v1/charges", "k", `{"amount":9999}`), 422, idemhttp.ProblemMismatch)
	problem(t, b.do("POST", "/v1/refunds", "k", `{"amount":1000}`), 422, idemhttp.ProblemMismatch)
	problem(t, b.do("POST", "/v1/charges?x=1", "k", `{"amount":1000}`), 422, idemhttp.ProblemMismatch)
	problem(t, b.do("PATCH", "/v1/charges", "k", `{"amount":1000}`), 422, idemhttp.ProblemMismatch)
	if n := b.n.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// Many concurrent requests with one key: one execution; every other answer is a 409 with
// Retry-After or a byte-identical replay.
func TestConcurrentOneEffect(t *testing.T) {
	t.Parallel()
	slow := func(b *bundle) fiber.Handler {
		h := charge(b)
		return func(c *fiber.Ctx) error { time.Sleep(20 * time.Millisecond); return h(c) }
	}
	b := setup(t, idem.Options{}, idemfiber.Options{Scope: idemfiber.SingleCaller()}, slow)
	const keys, per = 4, 25
	for k := range keys {
		key := fmt.Sprint("key-", k)
		answers := make([]answer, per)
		var wg sync.WaitGroup
		for i := range per {
			wg.Go(func() { answers[i] = b.do("POST", "/v1/charges", key, `{"amount":1}`) })
		}
		wg.Wait()
		executed, replayed, conflicts := 0, 0, 0
		var body string
		for _, a := range answers {
			switch {
			case a.Status == 201 && a.Header.Get(idemhttp.ReplayedHeader) == "":
				executed++
				body = a.Body
			case a.Status == 201:
				replayed++
			case a.Status == 409 && a.Header.Get("Retry-After") != "":
				conflicts++
			default:
				t.Fatalf("unexpected answer %+v", a)
			}
		}
		for _, a := range answers {
			if a.Status == 201 && a.Body != body {
				t.Fatalf("replay %q differs from the answer %q", a.Body, body)
			}
		}
		if executed != 1 || executed+replayed+conflicts != per {
			t.Fatalf("%s: %d executed, %d replayed, %d conflicts", key, executed, replayed, conflicts)
		}
	}
	if n := b.n.Load(); n != keys {
		t.Fatalf("%d executions for %d keys", n, keys)
	}
}

// A duplicate while the first runs gets 409 with Retry-After (422 with another body); once the
// first is done, the retry gets its answer.
func TestInFlight(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	blocking := func(b *bundle) fiber.Handler {
		h := charge(b)
		return func(c *fiber.Ctx) error { entered <- struct{}{}; <-release; return h(c) }
	}
	b := setup(t, idem.Options{}, idemfiber.Options{Scope: idemfiber.SingleCaller()}, blocking)
	done := make(chan answer)
	go func() { done <- b.do("POST", "/v1/charges", "k", "x") }()
	<-entered
	dup := b.do("POST", "/v1/charges", "k", "x")
	problem(t, dup, 409, idemhttp.ProblemInFlight)
	if ra := dup.Header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("Retry-After %q", ra)
	}
	problem(t, b.do("POST", "/v1/charges", "k", "other"), 422, idemhttp.ProblemMismatch)
	close(release)
	first := <-done
	if r := b.do("POST", "/v1/charges", "k", "x"); r.Body != first.Body || r.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("after: %+v, first %+v", r, first)
	}
	if n := b.n.Load(); n != 1 {
		t.Fatalf("%d executions", n)
	}
}

// The store down: 503 with Retry-After, and the handler does not run (fail closed).
func TestStoreDown(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{}, idemfiber.Options{StoreRetryAfter: 3 * time.Second, Scope: idemfiber.SingleCaller()}, charge)
	b.store.Close()
	r := b.do("POST", "/v1/charges", "k", "x")
	problem(t, r, 503, idemhttp.ProblemStoreUnavailable)
	if r.Header.Get("Retry-After") != "3" || b.n.Load() != 0 {
		t.Fatalf("Retry-After %q, %d executions", r.Header.Get("Retry-After"), b.n.Load())
	}
}

// Bad keys are 400 and nothing runs; a missing key passes through, or is 400 when required.
func TestKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{}, idemfiber.Options{Scope: idemfiber.SingleCaller()}, charge)
	for _, k := range []string{strings.Repeat("k", idem.MaxClientKeyLen+1), `"unterminated`, `""`, `"a";p=1`} {
		problem(t, b.do("POST", "/v1/charges", k, "x"), 400, idemhttp.ProblemInvalidKey)
	}
	problem(t, b.do("POST", "/v1/charges", "", "x", idem.KeyHeader, "a", idem.KeyHeader, "b"), 400, idemhttp.ProblemInvalidKey)
	// The key under a spelling CGI-style applications read as Idempotency-Key, alone or
	// beside it, as idemhttp refuses it.
	problem(t, b.do("POST", "/v1/charges", "", "x", "Idempotency_Key", "a"), 400, idemhttp.ProblemInvalidKey)
	problem(t, b.do("POST", "/v1/charges", "a", "x", "IDEMPOTENCY_KEY", "a"), 400, idemhttp.ProblemInvalidKey)
	if n := b.n.Load(); n != 0 {
		t.Fatalf("%d executions after bad keys", n)
	}
	r1, r2 := b.do("POST", "/v1/charges", "", "x"), b.do("POST", "/v1/charges", "", "x")
	if r1.Status != 201 || r2.Status != 201 || r2.Header.Get(idemhttp.ReplayedHeader) != "" || b.n.Load() != 2 {
		t.Fatalf("no key: %+v %+v", r1, r2)
	}
	req := setup(t, idem.Options{}, idemfiber.Options{RequireKey: true, Scope: idemfiber.SingleCaller()}, charge)
	problem(t, req.do("POST", "/v1/charges", "", "x"), 400, idemhttp.ProblemMissingKey)
	if req.n.Load() != 0 {
		t.Fatal("the handler ran without a required key")
	}
}

// Methods that are not processed pass through, key or not.
func TestMethodsPassThrough(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{}, idemfiber.Options{Scope: idemfiber.SingleCaller()}, charge)
	for range 2 {
		if r := b.do("PUT", "/v1/charges", "k", "x"); r.Status != 201 || r.Header.Get(idemhttp.ReplayedHeader) != "" {
			t.Fatalf("%+v", r)
		}
		b.do("GET", "/v1/charges", "k", "")
	}
	if n := b.n.Load(); n != 4 {
		t.Fatalf("%d executions, want 4", n)
	}
	put := setup(t, idem.Options{}, idemfiber.Options{Methods: []string{"PUT"}, Scope: idemfiber.SingleCaller()}, charge)
	put.do("PUT", "/v1/charges", "k", "x")
	if r := put.do("PUT", "/v1/charges", "k", "x"); r.Header.Get(idemhttp.ReplayedHeader) != "true" || put.n.Load() != 1 {
		t.Fatalf("PUT processed: %+v, %d executions", r, put.n.Load())
	}
}

// Tenants are apart: the same key in two scopes is two requests.
func TestScope(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{}, idemfiber.Options{Scope: idemfiber.HeaderScope("X-API-Key")}, charge)
	a1 := b.do("POST", "/v1/charges", "k", "x", "X-API-Key", "alice")
	b1 := b.do("POST", "/v1/charges", "k", "other", "X-API-Key", "bob")
	a2 := b.do("POST", "/v1/charges", "k", "x", "X-API-Key", "alice")
	if a1.Status != 201 || b1.Status != 201 || b1.Header.Get(idemhttp.ReplayedHeader) != "" || a2.Body != a1.Body || b.n.Load() != 2 {
		t.Fatalf("%+v %+v %+v", a1, b1, a2)
	}
	bad := setup(t, idem.Options{}, idemfiber.Options{Scope: func(*fiber.Ctx) (string, error) { return "", errors.New("no caller") }}, charge)
	problem(t, bad.do("POST", "/v1/charges", "k", "x"), 400, idemhttp.ProblemInvalidScope)
}

// Failure never looks like success: an error before answering and a 5xx release the key, so a
// retry runs; begun is not undone: an error or a panic after the handler began to answer holds
// the key (409), while a panic before it releases.
func TestFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		fail      func(c *fiber.Ctx) error
		firstCode int
		retryRuns bool
	}{
		{"error before answering", func(c *fiber.Ctx) error { return fiber.NewError(fiber.StatusBadRequest, "bad") }, 400, true},
		{"5xx answer", func(c *fiber.Ctx) error { return c.Status(502).SendString("upstream down") }, 502, true},
		{"panic before answering", func(c *fiber.Ctx) error { panic("boom") }, 500, true},
		{"error after answering", func(c *fiber.Ctx) error { _ = c.Status(201).SendString("done"); return errors.New("late") }, 500, false},
		{"panic after answering", func(c *fiber.Ctx) error { _ = c.Status(201).SendString("done"); panic("late") }, 500, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := func(b *bundle) fiber.Handler {
				ok := charge(b)
				return func(c *fiber.Ctx) error {
					if b.n.Add(1) == 1 {
						return tc.fail(c)
					}
					b.n.Add(-1)
					return ok(c)
				}
			}
			b := setup(t, idem.Options{}, idemfiber.Options{Scope: idemfiber.SingleCaller()}, h)
			if r := b.do("POST", "/v1/charges", "k", "x"); r.Status != tc.firstCode {
				t.Fatalf("first: %+v, want %d", r, tc.firstCode)
			}
			retry := b.do("POST", "/v1/charges", "k", "x")
			if tc.retryRuns {
				if retry.Status != 201 || retry.Header.Get(idemhttp.ReplayedHeader) != "" || b.n.Load() != 2 {
					t.Fatalf("retry: %+v, %d runs; want a second execution", retry, b.n.Load())
				}
				return
			}
			problem(t, retry, 409, idemhttp.ProblemInFlight)
			if b.n.Load() != 1 {
				t.Fatalf("%d runs, want 1", b.n.Load())
			}
		})
	}
}

// A response larger than MaxResponseBody is sent, not kept: the retry is told so, with the
// original status, and nothing runs again.
func TestResponseNotRetained(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{}, idemfiber.Options{MaxResponseBody: 10, Scope: idemfiber.SingleCaller()}, charge)
	if r := b.do("POST", "/v1/charges", "k", "a body longer than ten bytes"); r.Status != 201 || !strings.Contains(r.Body, "ten bytes") {
		t.Fatalf("%+v", r)
	}
	r := b.do("POST", "/v1/charges", "k", "a body longer than ten bytes")
	problem(t, r, 201, idemhttp.ProblemNotRetained)
	if r.Header.Get(idemhttp.ReplayedHeader) != "true" || b.n.Load() != 1 {
		t.Fatalf("%+v, %d runs", r, b.n.Load())
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	if _, err := idemfiber.New(idemfiber.Options{Scope: idemfiber.SingleCaller()}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("no engine: %v", err)
	}
	// No scope decision: one scope for every caller would hand one caller's stored response
	// to another who sends the same key and body.
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = idemfiber.New(idemfiber.Options{Runner: eng})
	if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), "idemfiber: invalid options: Options.Scope") {
		t.Fatalf("no scope: %v, want idem.ErrInvalidInput naming idemfiber: invalid options: Options.Scope", err)
	}
	if _, err := idemfiber.New(idemfiber.Options{Runner: eng, Scope: idemfiber.SingleCaller()}); err != nil {
		t.Fatalf("SingleCaller: %v", err)
	}
}

// The keyed header scope is idemhttp's for the same request (the two middlewares share
// records), keeps tenants apart, and refuses a request that sends the header twice.
func TestKeyedHeaderScope(t *testing.T) {
	t.Parallel()
	secret := []byte("a secret of sixteen bytes or more")
	fs := idemfiber.KeyedHeaderScope("X-API-Key", secret)
	hs := idemhttp.KeyedHeaderScope("X-API-Key", secret)
	app := fiber.New()
	scope := func(values ...string) (string, error) {
		c := app.AcquireCtx(&fasthttp.RequestCtx{})
		defer app.ReleaseCtx(c)
		for _, v := range values {
			c.Request().Header.Add("X-API-Key", v)
		}
		return fs(c)
	}
	for _, v := range []string{"alice", "bob"} {
		got, err := scope(v)
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("X-API-Key", v)
		want, _ := hs(r)
		if err != nil || got != want || got == "" {
			t.Errorf("%s: scope %q %v, want idemhttp's %q", v, got, err, want)
		}
	}
	if s, err := scope(); s != "" || err != nil {
		t.Errorf("no header: %q %v, want anonymous", s, err)
	}
	if _, err := scope("alice", "bob"); !errors.Is(err, idemhttp.ErrInvalidScope) {
		t.Errorf("header sent twice: %v, want ErrInvalidScope", err)
	}
	// Another spelling that a CGI-style application reads as the same header is refused, with
	// or without the header itself, as idemhttp refuses it.
	for _, hdr := range [][2]string{{"X_API_KEY", "mallory"}, {"x_api_key", "mallory"}, {"X-API_Key", "mallory"}} {
		c := app.AcquireCtx(&fasthttp.RequestCtx{})
		c.Request().Header.Set(hdr[0], hdr[1])
		_, err := fs(c)
		c.Request().Header.Set("X-API-Key", "alice")
		_, err2 := fs(c)
		app.ReleaseCtx(c)
		r := httptest.NewRequest("POST", "/", nil)
		r.Header[hdr[0]] = []string{hdr[1]}
		_, herr := hs(r)
		for _, e := range []error{err, err2, herr} {
			if !errors.Is(e, idemhttp.ErrScopeHeaderSpelling) || !errors.Is(e, idemhttp.ErrInvalidScope) {
				t.Errorf("%s: %v, want ErrScopeHeaderSpelling (idemfiber without and with the header, then idemhttp)", hdr[0], e)
			}
		}
	}

	b := setup(t, idem.Options{}, idemfiber.Options{Scope: fs}, charge)
	a1 := b.do("POST", "/v1/charges", "k", "x", "X-API-Key", "alice")
	b1 := b.do("POST", "/v1/charges", "k", "x", "X-API-Key", "bob")
	if a1.Status != 201 || b1.Status != 201 || b1.Header.Get(idemhttp.ReplayedHeader) != "" || b1.Body == a1.Body || b.n.Load() != 2 {
		t.Fatalf("bob sent alice's key and body: %+v after %+v (%d runs)", b1, a1, b.n.Load())
	}
	m1 := b.do("POST", "/v1/charges", "k2", "x", "X_API_KEY", "alice")
	if m1.Status != 400 || !strings.Contains(m1.Body, idemhttp.ProblemScopeHeaderSpelling) || b.n.Load() != 2 {
		t.Fatalf("the scope header spelled X_API_KEY: %+v (%d runs), want 400 %s and nothing run", m1, b.n.Load(), idemhttp.ProblemScopeHeaderSpelling)
	}
}
