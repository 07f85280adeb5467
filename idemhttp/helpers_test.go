package idemhttp_test

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

func TestMain(m *testing.M) {
	if os.Getenv(benchChildEnv) != "" {
		os.Exit(benchChild())
	}
	if mode := os.Getenv(slowBodyChildEnv); mode != "" {
		os.Exit(slowBodyChild(mode))
	}
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// bundle is one test's server: the middleware over a handler, on a real loopback server.
type bundle struct {
	t      testing.TB
	srv    *httptest.Server
	eng    *idem.Engine
	store  idem.Store
	mu     sync.Mutex
	events []idemhttp.Event
}

// setup starts a server with the middleware (opt; Engine is filled from eo and store, memstore
// by default) in front of h.
func setup(t testing.TB, store idem.Store, eo idem.Options, opt idemhttp.Options, h http.Handler) *bundle {
	t.Helper()
	if store == nil {
		store = memstore.New()
	}
	if eo.Logger == nil {
		eo.Logger = quiet
	}
	eng, err := idem.New(store, eo)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{t: t, eng: eng, store: store}
	opt.Runner = eng
	if opt.Logger == nil {
		opt.Logger = quiet
	}
	if opt.OnEvent == nil {
		opt.OnEvent = func(ev idemhttp.Event) {
			ev.Request = nil
			b.mu.Lock()
			b.events = append(b.events, ev)
			b.mu.Unlock()
		}
	}
	mw, err := idemhttp.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = httptest.NewUnstartedServer(mw(h))
	b.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handler panics are expected in tests
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	return b
}

// reply is a response read in full.
type reply struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error // reading the body failed (a cut-off response)
}

// do sends a request with the key ("" for none) and extra header pairs.
func (b *bundle) do(method, path, key, body string, hdr ...string) reply {
	b.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := b.srv.Client().Do(req)
	if err != nil {
		return reply{Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: data, Err: err}
}

func (b *bundle) outcomes() []idemhttp.Outcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []idemhttp.Outcome
	for _, ev := range b.events {
		out = append(out, ev.Outcome)
	}
	return out
}

// stable returns the header without what changes per response (Date) or marks a replay.
func stable(h http.Header) http.Header {
	h = h.Clone()
	h.Del("Date")
	h.Del("Content-Length") // framing: a streamed first answer is chunked, its replay is not
	h.Del(idemhttp.ReplayedHeader)
	return h
}

func sameReply(t *testing.T, a, b reply) {
	t.Helper()
	if a.Status != b.Status || !bytes.Equal(a.Body, b.Body) {
		t.Fatalf("replies differ:\n%d %q\n%d %q", a.Status, a.Body, b.Status, b.Body)
	}
	ha, hb := stable(a.Header), stable(b.Header)
	if !headersEqual(ha, hb) {
		t.Fatalf("headers differ:\n%v\n%v", ha, hb)
	}
}

func headersEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w := b[k]
		if strings.Join(v, "\x00") != strings.Join(w, "\x00") {
			return false
		}
	}
	return true
}

func problemType(t *testing.T, r reply) string {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); ct != idemhttp.ProblemContentType {
		t.Fatalf("Content-Type %q, want %s (status %d, body %q)", ct, idemhttp.ProblemContentType, r.Status, r.Body)
	}
	s := string(r.Body)
	i := strings.Index(s, `"type":"`)
	if i < 0 {
		t.Fatalf("no type in %q", s)
	}
	s = s[i+8:]
	return s[:strings.IndexByte(s, '"')]
}

// runnerFunc is an idem.Runner whose Run is the function itself, given the Call's key and
// fingerprint.
type runnerFunc func(ctx context.Context, key, fingerprint string, fn idem.Func) (idem.Result, error)

func (f runnerFunc) Run(ctx context.Context, call idem.Call, fn idem.Func) (idem.Result, error) {
	return f(ctx, call.Key, call.Fingerprint, fn)
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
