package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"slices"
	"time"

	"github.com/idemkit/idem"
)

// New returns the middleware: a func(http.Handler) http.Handler that fits net/http, chi,
// gorilla/mux and any router taking standard middleware. The handler behind it knows nothing
// of idempotency. New fails with an *idem.OptionError (matching idem.ErrInvalidInput) naming
// the field if an option is invalid.
//
// For each request with a processed method (Options.Methods) and a key, the middleware reads
// the body (up to Options.MaxRequestBody), computes the scope and the fingerprint, and asks the
// engine to run the handler at most once for (scope, key). The handler's response is captured
// and kept (per the engine's Policy) and replayed to every later request with the key and the
// same fingerprint, with Idempotent-Replayed: true. See the package documentation for the
// answers it gives otherwise.
func New(opt Options) (func(http.Handler) http.Handler, error) {
	m, err := newMiddleware(opt)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return &handler{m: m, next: next}
	}, nil
}

type middleware struct {
	opt     Options
	eng     idem.Runner
	policy  idem.Policy
	ttl     time.Duration
	now     func() time.Time
	skip    nameSet  // response headers never stored
	retry   []string // Retry-After for 503
	methods []string
	checkFP bool // Options.Fingerprint is the caller's: check what it returns
	budget  *Budget
	probs   map[*problem]*problem // the refusals in Options.FormatProblem's shape
}

// problem returns p as this middleware answers it: in Options.FormatProblem's shape when set.
func (m *middleware) problem(p *problem) *problem {
	if q, ok := m.probs[p]; ok {
		return q
	}
	return p
}

func newMiddleware(opt Options) (*middleware, error) {
	checkFP := opt.Fingerprint != nil
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	eng := opt.Runner
	eo := eng.Options()
	if eo.Policy == nil {
		eo.Policy = idem.DefaultPolicy
	}
	if eo.Now == nil {
		eo.Now = time.Now
	}
	m := &middleware{
		opt: opt, eng: eng, policy: eo.Policy, ttl: eo.TTL, now: eo.Now,
		methods: opt.Methods, checkFP: checkFP,
		retry: retryAfterValue(int64((opt.StoreRetryAfter + time.Second - 1) / time.Second)),
	}
	if opt.FormatProblem != nil {
		m.probs = make(map[*problem]*problem, len(allProblems))
		for _, p := range allProblems {
			q := p.formatted(opt.FormatProblem)
			if len(q.ct[0]) == 0 {
				return nil, optionError("Options.FormatProblem", "returned no content type for %s", p.typ)
			}
			m.probs[p] = q
		}
	}
	m.budget = opt.Budget
	if m.budget == nil {
		m.budget = NewBudget(opt.MemoryBudget)
	}
	for _, h := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", ReplayedHeader, ExpiresHeader} {
		m.skip.add(h)
	}
	for _, h := range opt.DenyHeaders {
		m.skip.add(http.CanonicalHeaderKey(h))
	}
	return m, nil
}

// nameSet is a set of header names, looked up on every stored header of every response: by
// length first, so a name of a length no member has (Content-Type, Content-Length…) costs an
// index and no hashing.
type nameSet struct {
	byLen [64][]string
	long  map[string]bool // names of 64 bytes or more
}

func (s *nameSet) add(name string) {
	if len(name) >= len(s.byLen) {
		if s.long == nil {
			s.long = make(map[string]bool)
		}
		s.long[name] = true
		return
	}
	if !slices.Contains(s.byLen[len(name)], name) {
		s.byLen[len(name)] = append(s.byLen[len(name)], name)
	}
}

func (s *nameSet) has(name string) bool {
	if len(name) >= len(s.byLen) {
		return s.long[name]
	}
	for _, x := range s.byLen[len(name)] {
		if x == name {
			return true
		}
	}
	return false
}

// keeps predicts whether a response with this status will be kept, for the ExpiresHeader of
// a response sent before the engine decides.
func (m *middleware) keeps(status int) bool {
	return m.policy(idem.Response{Status: status}, nil) == idem.DispositionKeep
}

// storedHeader returns the headers of h to store: all but hop-by-hop, denied and
// Connection-named ones. When share is true and none of those is present it returns h itself, which the caller
// must not change until the store has copied it (Store.Complete copies before it returns);
// otherwise a new map whose value slices are shared with h, capped so an append to h cannot
// write into them.
func (m *middleware) storedHeader(h http.Header, share bool) http.Header {
	conn := h["Connection"]
	drop := !share
	for k, v := range h {
		if m.drops(k, v, conn) {
			drop = true
			break
		}
	}
	if !drop {
		return h
	}
	out := make(http.Header, len(h))
	for k, v := range h {
		if !m.drops(k, v, conn) {
			out[k] = v[:len(v):len(v)]
		}
	}
	return out
}

// drops reports whether header k (values v) is not stored; conn is the Connection header.
func (m *middleware) drops(k string, v, conn []string) bool {
	return m.skip.has(k) || len(v) == 0 || len(k) > 8 && k[:8] == "Trailer:" || len(conn) > 0 && namedIn(conn, k)
}

// namedIn reports whether the Connection header values name k.
func namedIn(conn []string, k string) bool {
	for _, v := range conn {
		for len(v) > 0 {
			var tok string
			i := 0
			for i < len(v) && v[i] != ',' {
				i++
			}
			tok, v = v[:i], v[min(i+1, len(v)):]
			for len(tok) > 0 && (tok[0] == ' ' || tok[0] == '\t') {
				tok = tok[1:]
			}
			for len(tok) > 0 && (tok[len(tok)-1] == ' ' || tok[len(tok)-1] == '\t') {
				tok = tok[:len(tok)-1]
			}
			if http.CanonicalHeaderKey(tok) == k {
				return true
			}
		}
	}
	return false
}

type handler struct {
	m    *middleware
	next http.Handler
}

var replayedTrue = []string{"true"}

// ServeHTTP implements http.Handler: prepare reads what the request asks (or answers it when
// it cannot be run under a claim), then the engine runs the handler once per key, and finish
// (or aborted) answers.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	var start time.Time
	if m.opt.OnEvent != nil {
		start = time.Now()
	}
	p, ok := h.prepare(w, r, start)
	if !ok {
		return
	}
	c, key := p.c, p.key
	c.h, c.r = h, r
	done := false
	defer func() {
		if !done {
			h.recovered(w, r, c, key, start, recover())
		}
	}()
	call := idem.Call{Key: StorageKey(p.scope, key), Fingerprint: p.fp, Route: m.opt.Route(r)}
	if m.opt.RetainRequest {
		call.Request = m.retained(r, c.body.b)
	}
	res, err := m.eng.Run(r.Context(), call, c.run)
	done = true
	if c.panicked != nil {
		m.budget.give(&c.held) // the capture is not pooled again: the handler may hold its buffers
		h.aborted(r, c, key, start, res, err)
	}
	h.finish(w, r, c, key, start, res, err)
	c.release()
}

// prepared is what prepare read of a request to be run under a claim.
type prepared struct {
	c              *captureWriter // holds the body read
	key, scope, fp string
}

// prepare reads the request's key, scope, body and fingerprint. When the request is not to
// run under a claim (a method not processed, no key, a key, scope or body refused), it answers
// it, reports its Event and returns false.
func (h *handler) prepare(w http.ResponseWriter, r *http.Request, start time.Time) (prepared, bool) {
	m := h.m
	if !m.processes(r.Method) {
		h.next.ServeHTTP(w, r)
		m.emit(Event{Outcome: OutcomeBypass, Request: r, Start: start})
		return prepared{}, false
	}
	var key string
	if !m.opt.Key.needsBody() {
		var err error
		if key, err = m.opt.Key.fromHeader(r.Header); err != nil {
			h.reject(w, r, nil, probInvalidKey, Event{Start: start, Err: err})
			return prepared{}, false
		}
		if key == "" {
			h.noKey(w, r, start, nil)
			return prepared{}, false
		}
	}
	scope := ""
	if m.opt.Scope != nil {
		var err error
		scope, err = m.opt.Scope(r)
		if err == nil && !ValidScope(scope) {
			err = ErrInvalidScope
		}
		if err != nil {
			m.opt.Logger.Warn("idemhttp: could not scope the request", "method", r.Method, "path", r.URL.Path, "err", err)
			p := probInvalidScope
			if errors.Is(err, ErrScopeHeaderSpelling) {
				p = probScopeSpelling
			}
			h.reject(w, r, nil, p, Event{Key: key, Start: start, Err: errors.Join(ErrInvalidScope, err)})
			return prepared{}, false
		}
	}

	c := captures.Get().(*captureWriter)
	c.m = m
	c.w = w
	if c.buf == nil {
		c.buf, c.reqBuf = getBuf(), getBuf()
	}
	body, p, err := m.readBody(r, c)
	if p != nil {
		h.reject(w, r, c, p, Event{Key: key, Start: start, Err: err})
		return prepared{}, false
	}
	c.body.b = body
	if m.opt.Key.needsBody() {
		if key, err = m.opt.Key.fromBody(r, body); err != nil {
			h.reject(w, r, c, probInvalidKey, Event{Start: start, Err: err})
			return prepared{}, false
		}
		if key == "" {
			r2 := r.WithContext(r.Context())
			r2.Body = c.body.open(m.opt.DetachBody)
			h.noKey(w, r2, start, c)
			return prepared{}, false
		}
	}
	fp, err := m.opt.Fingerprint(r, body)
	if err == nil && m.checkFP && !idem.ValidFingerprint(fp) {
		m.opt.Logger.Error("idemhttp: Options.Fingerprint returned an invalid fingerprint", "fingerprint", fp)
		h.reject(w, r, c, probInternal, Event{Key: key, Start: start, Err: errInvalidFingerprint})
		return prepared{}, false
	}
	if err != nil {
		h.reject(w, r, c, probInvalidBody, Event{Key: key, Start: start, Err: err})
		return prepared{}, false
	}
	return prepared{c: c, key: key, scope: scope, fp: fp}, true
}

// recovered is ServeHTTP's deferred end when the engine did not return: the handler (or
// something under it) panicked with p before it began to answer, or called runtime.Goexit
// (p nil). The engine has released the claim. It answers 500 if nothing was sent yet, then
// lets the panic go on to http.Server, which logs it and closes the connection (a response
// already started is cut off: the client sees a broken response, never a partial success).
func (h *handler) recovered(w http.ResponseWriter, r *http.Request, c *captureWriter, key string, start time.Time, p any) {
	m := h.m
	m.budget.give(&c.held) // the capture is not pooled again: the handler may hold its buffers
	if p == nil {
		return
	}
	if p != http.ErrAbortHandler && !c.committed {
		clear(w.Header())
		m.problem(probPanic).write(w, nil)
		if f, ok := w.(http.Flusher); ok {
			f.Flush() // http.Server does not flush a handler's buffered output after a panic
		}
	}
	m.opt.Logger.Error("idemhttp: handler panicked; claim released", "method", r.Method, "path", r.URL.Path)
	status := 0
	if !c.committed && p != http.ErrAbortHandler {
		status = 500
	}
	m.emit(Event{Outcome: OutcomeReleased, Request: r, Key: key, Status: status, Start: start, Handler: c.took, Err: errors.New("idemhttp: handler panicked")})
	panic(p)
}

// processes reports whether method is one of Options.Methods.
func (m *middleware) processes(method string) bool {
	for _, x := range m.methods {
		if x == method {
			return true
		}
	}
	return false
}

// noKey handles a processed request without a key; c is the capture that read its body, if
// any, and noKey releases it.
func (h *handler) noKey(w http.ResponseWriter, r *http.Request, start time.Time, c *captureWriter) {
	m := h.m
	if m.opt.RequireKey {
		h.reject(w, r, c, probMissingKey, Event{Start: start})
		return
	}
	if c != nil {
		c.serveUnprotected(h.next, w, r)
		c.release()
	} else {
		h.next.ServeHTTP(w, r)
	}
	m.emit(Event{Outcome: OutcomeBypass, Request: r, Start: start})
}

// reject is the one way out of a request the middleware refuses before it asks the engine for
// a claim, as http.ReverseProxy sends every error to one ErrorHandler: nothing has run and
// nothing is held. It writes problem p (with its Retry-After, if it has one), reports ev with
// p's outcome and status, and returns the capture c, if any, to its pool.
func (h *handler) reject(w http.ResponseWriter, r *http.Request, c *captureWriter, p *problem, ev Event) {
	h.m.problem(p).write(w, p.retryAfter)
	ev.Outcome, ev.Request, ev.Status = p.outcome, r, p.status
	h.m.emit(ev)
	if c != nil {
		c.release()
	}
}

var errInvalidFingerprint = errors.New("idemhttp: Options.Fingerprint returned an invalid fingerprint")

// readBody reads the request body into the capture's request buffer, bounded by
// MaxRequestBody, and charges the capture's buffers to the memory budget. When it cannot, it
// returns the problem to answer (probTooLarge, probOverloaded, probInvalidBody) and the error
// behind it, if any.
//
// The buffer grows as bytes arrive, doubling, to at most the declared length (and one byte,
// to see EOF without growing) or the limit: a Content-Length never reserves memory that the
// client has not sent.
func (m *middleware) readBody(r *http.Request, c *captureWriter) ([]byte, *problem, error) {
	if !m.budget.take(&c.held, int64(cap(*c.buf)+cap(*c.reqBuf))) {
		return nil, probOverloaded, nil
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil, nil
	}
	limit := m.opt.MaxRequestBody
	if r.ContentLength > limit {
		return nil, probTooLarge, nil
	}
	b := *c.reqBuf
	for {
		if len(b) == cap(b) {
			// Double, but no further than the declared length + 1 or the limit + 1 (enough to
			// see that a body is too large).
			n := max(2*int64(cap(b)), minBodyBuf)
			if r.ContentLength > int64(len(b)) {
				n = min(n, r.ContentLength+1)
			}
			n = min(n, limit+1)
			if !m.budget.take(&c.held, n-int64(cap(b))) {
				*c.reqBuf = b[:0]
				return nil, probOverloaded, nil
			}
			nb := make([]byte, len(b), n)
			copy(nb, b)
			b = nb
		}
		n, err := r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			*c.reqBuf = b[:0]
			return nil, probTooLarge, nil
		}
		if err == io.EOF || err == nil && r.ContentLength > 0 && int64(len(b)) == r.ContentLength {
			break // all of a declared length is read: the server's body has nothing more
		}
		if err != nil {
			*c.reqBuf = b[:0]
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, probTooLarge, err
			}
			return nil, probInvalidBody, err
		}
	}
	*c.reqBuf = b
	if m.opt.DetachBody && !m.budget.take(&c.held, int64(len(b))) {
		return nil, probOverloaded, nil // no room for the handler's own copy
	}
	return b, nil, nil
}

// release returns the capture to its pool. The capture keeps its response and request
// buffers (emptied), so a request takes one object from a pool, not three; if either grew too
// large to pool, both are dropped. It keeps its body's io.NopCloser too.
func (c *captureWriter) release() {
	c.m.budget.give(&c.held)
	buf, reqBuf := c.buf, c.reqBuf
	if cap(*buf) > maxPooled || cap(*reqBuf) > maxPooled {
		buf, reqBuf = nil, nil // fresh ones from the pool next time
	} else {
		*buf, *reqBuf = (*buf)[:0], (*reqBuf)[:0]
	}
	*c = captureWriter{buf: buf, reqBuf: reqBuf, body: bodyReader{rc: c.body.rc}} // rc reads c.body.r
	captures.Put(c)
}

// run is the engine's idem.Func: it runs the handler with the capture writer and returns the
// response to keep.
func (c *captureWriter) run(ctx context.Context) (idem.Response, error) {
	c.ran = true
	r := c.r.WithContext(ctx)
	r.Body = c.body.open(c.m.opt.DetachBody)
	var t0 time.Time
	if c.m.opt.OnEvent != nil {
		t0 = time.Now()
	}
	c.serve(r)
	if !t0.IsZero() {
		c.took = time.Since(t0)
	}
	if c.status == 0 {
		c.status = http.StatusOK // a handler that never writes answers 200 with no body
	}
	if !c.committed {
		// Nothing changes the header map until the engine has stored the response.
		h := c.w.Header()
		c.sniff(h)
		c.stored = c.m.storedHeader(h, true)
	}
	resp := idem.Response{Status: c.status, Header: c.stored, BodyOmitted: c.omitted}
	if !c.omitted && len(*c.buf) > 0 {
		// Not copied: the store copies what it keeps before Complete returns, and the buffer
		// goes back to its pool only after the answer is written.
		resp.Body = *c.buf
	}
	if c.panicked != nil && !(c.omitted && c.gone) {
		// The handler began to answer, then panicked or aborted (a reverse proxy does when
		// the upstream's answer breaks off): the effect may have happened and the answer is
		// not whole. Held as uncertain, never released. (A response too large to keep that
		// was cut off because its client went away is whole as far as idem keeps it: its
		// status and headers, completed without the body.)
		return resp, idem.Uncertain(errAborted)
	}
	switch c.mark {
	case markFailed:
		return resp, errMarkedFailed
	case markUncertain:
		return resp, idem.Uncertain(errMarkedUncertain)
	}
	return resp, nil
}

// serve runs the handler. A panic (http.ErrAbortHandler included) after the handler began to
// answer is recovered into c.panicked, for run to hold the claim and ServeHTTP to panic again
// once the engine has recorded the outcome: begun is not undone. A panic before that goes on
// through the engine, which releases the claim.
func (c *captureWriter) serve(r *http.Request) {
	returned := false
	defer func() {
		if !returned && c.status != 0 {
			c.panicked = recover() // nil on runtime.Goexit, which goes on
			if c.panicked != nil && c.panicked != http.ErrAbortHandler {
				c.stack = debug.Stack() // the panic goes on from elsewhere: keep where it began
			}
		}
	}()
	c.h.next.ServeHTTP(c, r)
	returned = true
}

// aborted answers, after the engine recorded the outcome, for a handler that panicked after it
// began to answer, then lets the panic go on to http.Server, which closes the connection: the
// client sees a broken response, never a partial success, and its retry gets the stored or held
// outcome.
func (h *handler) aborted(r *http.Request, c *captureWriter, key string, start time.Time, res idem.Result, err error) {
	m := h.m
	ev := Event{Request: r, Key: key, Status: c.status, Start: start, Handler: c.took, Takeover: res.Takeover, Err: errAborted, Outcome: OutcomeUncertain}
	switch {
	case res.Kept:
		ev.Outcome = OutcomeOversize
		m.opt.Logger.Warn("idemhttp: client went away while a response too large to keep streamed; completed without its body",
			"method", r.Method, "path", r.URL.Path)
	case errors.Is(err, errAborted) && c.stack == nil:
		m.opt.Logger.Warn("idemhttp: handler aborted after it began to answer; claim held as uncertain",
			"method", r.Method, "path", r.URL.Path)
	case errors.Is(err, errAborted):
		m.opt.Logger.Error("idemhttp: handler panicked after it began to answer; claim held as uncertain",
			"method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(c.panicked), "stack", string(c.stack))
	default:
		ev.Outcome, ev.Err = OutcomeError, errors.Join(errAborted, err)
		m.opt.Logger.Error("idemhttp: handler panicked after it began to answer", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	m.emit(ev)
	panic(c.panicked)
}

// finish answers after the engine returned.
func (h *handler) finish(w http.ResponseWriter, r *http.Request, c *captureWriter, key string, start time.Time, res idem.Result, err error) {
	m := h.m
	ev := Event{Request: r, Key: key, Start: start, Handler: c.took, Takeover: res.Takeover}
	switch {
	case c.ran && (res.Executed || err == nil || c.committed):
		if !c.committed {
			hd := w.Header()
			if res.Kept && m.opt.ExpiresHeader {
				hd[ExpiresHeader] = []string{res.ExpiresAt.UTC().Format(http.TimeFormat)}
			}
			w.WriteHeader(res.Response.Status)
			if len(res.Response.Body) > 0 {
				_, _ = w.Write(res.Response.Body)
			}
		}
		ev.Status = c.status
		switch {
		case errors.Is(err, errMarkedUncertain):
			ev.Outcome = OutcomeUncertain
		case errors.Is(err, errMarkedFailed) || !res.Kept && err == nil:
			ev.Outcome = OutcomeReleased
		case c.omitted:
			ev.Outcome = OutcomeOversize
		default:
			ev.Outcome = OutcomeExecuted
		}
		if err != nil && !errors.Is(err, errMarkedFailed) && !errors.Is(err, errMarkedUncertain) {
			// The handler ran and answered, but its result could not be recorded: the client
			// has its answer; a retry sees 409 until the lease runs out.
			ev.Err = err
			m.opt.Logger.Warn("idemhttp: handler ran but its result was not stored", "method", r.Method, "path", r.URL.Path, "err", err)
		}
	case err == nil && res.Replayed:
		m.replay(w, &res)
		ev.Outcome, ev.Status = OutcomeReplay, res.Response.Status
	case errors.Is(err, idem.ErrMismatch):
		m.problem(probMismatch).write(w, nil)
		ev.Outcome, ev.Status = OutcomeMismatch, probMismatch.status
	case errors.Is(err, idem.ErrInFlight):
		var ife *idem.InFlightError
		secs := int64(1)
		if errors.As(err, &ife) {
			secs = int64((ife.RetryAfter + time.Second - 1) / time.Second)
		}
		m.problem(probInFlight).write(w, retryAfterValue(secs))
		ev.Outcome, ev.Status = OutcomeInFlight, probInFlight.status
	case errors.Is(err, idem.ErrStoreUnavailable):
		ev.Err = err
		if m.opt.FailOpen && !c.ran {
			m.opt.Logger.Warn("idemhttp: store unavailable; request passed WITHOUT idempotency protection (fail open)",
				"method", r.Method, "path", r.URL.Path, "err", err)
			r2 := r.WithContext(r.Context())
			r2.Body = c.body.open(m.opt.DetachBody)
			c.serveUnprotected(h.next, w, r2)
			ev.Outcome = OutcomeFailOpen
			break
		}
		m.opt.Logger.Warn("idemhttp: store unavailable; request refused (fail closed)", "method", r.Method, "path", r.URL.Path, "err", err)
		m.problem(probStore).write(w, m.retry)
		ev.Outcome, ev.Status = OutcomeStoreError, probStore.status
	default:
		// The client went away while waiting, or an unexpected error: nothing was done.
		if r.Context().Err() == nil {
			m.opt.Logger.Error("idemhttp: unexpected engine error", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		m.problem(probInternal).write(w, nil)
		ev.Outcome, ev.Status, ev.Err = OutcomeError, probInternal.status, err
	}
	m.emit(ev)
}

// replay writes a stored response.
func (m *middleware) replay(w http.ResponseWriter, res *idem.Result) {
	resp := &res.Response
	h := w.Header()
	status := resp.Status
	if status == 0 {
		status = http.StatusOK
	}
	if resp.BodyOmitted {
		for k, v := range resp.Header {
			if !entityHeader[k] {
				h[k] = v[:len(v):len(v)]
			}
		}
		ct, body := problemCT, notRetainedBody(status)
		if m.opt.FormatProblem != nil {
			var t string
			t, body = m.opt.FormatProblem(Problem{Status: status, Type: ProblemNotRetained, Title: notRetainedTitle})
			ct = []string{t}
		}
		h["Content-Type"] = ct
		h["X-Content-Type-Options"] = nosniff
		h[ReplayedHeader] = replayedTrue
		if m.opt.ExpiresHeader {
			h[ExpiresHeader] = []string{res.ExpiresAt.UTC().Format(http.TimeFormat)}
		}
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}
	for k, v := range resp.Header {
		h[k] = v[:len(v):len(v)]
	}
	h[ReplayedHeader] = replayedTrue
	if m.opt.ExpiresHeader {
		h[ExpiresHeader] = []string{res.ExpiresAt.UTC().Format(http.TimeFormat)}
	}
	w.WriteHeader(status)
	if len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
}

// entityHeader are the headers that describe a body: not replayed with a ProblemNotRetained
// answer, which has its own body.
var entityHeader = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Content-Encoding": true, "Content-Range": true,
	"Content-Language": true, "Content-Disposition": true, "Content-Md5": true, "Digest": true,
	"Content-Digest": true, "Repr-Digest": true, "Etag": true, "Last-Modified": true,
}

func (m *middleware) emit(ev Event) {
	if m.opt.OnEvent == nil {
		return
	}
	if !ev.Start.IsZero() {
		ev.Duration = time.Since(ev.Start)
	}
	m.opt.OnEvent(ev)
}
