package idemfiber

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gofiber/fiber/v2"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// DefaultMaxResponseBody is the default of Options.MaxResponseBody: 1 MiB.
const DefaultMaxResponseBody = 1 << 20

// optionError reports an invalid option as an *idem.OptionError raised by idemfiber.
func optionError(field, format string, args ...any) error {
	return &idem.OptionError{Package: "idemfiber", Field: field, Problem: fmt.Sprintf(format, args...)}
}

// A ScopeFunc returns the tenant a request acts for (see idemhttp.ScopeFunc). It must return
// the same scope for every retry of a request.
type ScopeFunc func(c *fiber.Ctx) (string, error)

// SingleCaller is the Options.Scope of an API that one trusted caller is the only one to use:
// every request is in the one scope "", so keys are global, and any caller who sends another's
// key and body receives the other's stored response. Choose it explicitly; with more than one
// caller, scope by the caller's identity instead (KeyedHeaderScope, or a ScopeFunc of your own).
func SingleCaller() ScopeFunc { return singleCaller }

func singleCaller(*fiber.Ctx) (string, error) { return "", nil }

// HeaderScope scopes requests by the value of the named header (such as X-API-Key), hashed
// with idemhttp.HashScope so that no secret reaches the store. A request without the header is
// anonymous (scope ""); one that sends it more than once is refused (400), as idemhttp does;
// and so is one that carries it under another spelling that servers following CGI's naming
// read as the same header, such as X_API_KEY for X-API-Key (400, ProblemScopeHeaderSpelling:
// see idemhttp.ErrScopeHeaderSpelling), with or without the header itself.
//
// An unkeyed hash of a guessable credential can be reversed by trying guesses: prefer
// KeyedHeaderScope, whose hash needs a secret kept apart from the store.
func HeaderScope(name string) ScopeFunc {
	return headerScope(name, idemhttp.HashScope)
}

// KeyedHeaderScope is HeaderScope with the value hashed by HMAC-SHA256 under secret
// (idemhttp.KeyedHashScope), the scope idemhttp.KeyedHeaderScope gives the same request: the
// two middlewares share records. Every process that shares a store must use the same secret.
// It panics if secret is empty.
func KeyedHeaderScope(name string, secret []byte) ScopeFunc {
	if len(secret) == 0 {
		panic("idemfiber: KeyedHeaderScope with an empty secret")
	}
	secret = bytes.Clone(secret)
	return headerScope(name, func(values ...string) string { return idemhttp.KeyedHashScope(secret, values[0]) })
}

func headerScope(name string, hash func(...string) string) ScopeFunc {
	return func(c *fiber.Ctx) (string, error) {
		var other []byte
		c.Request().Header.VisitAll(func(k, _ []byte) {
			if other == nil && !strings.EqualFold(string(k), name) && idemhttp.SameCGIHeader(string(k), name) {
				other = bytes.Clone(k)
			}
		})
		if other != nil {
			return "", fmt.Errorf("%w: %w: header %q is read as %s by servers that follow CGI's naming; send %s",
				idemhttp.ErrInvalidScope, idemhttp.ErrScopeHeaderSpelling, other, name, name)
		}
		vs := c.Request().Header.PeekAll(name)
		switch len(vs) {
		case 0:
			return "", nil
		case 1:
			if len(vs[0]) == 0 {
				return "", nil
			}
			return hash(string(vs[0])), nil
		}
		return "", fmt.Errorf("%w: header %s sent %d times", idemhttp.ErrInvalidScope, name, len(vs))
	}
}

// otherKeySpelling reports whether the request carries the key header under another spelling
// that servers following CGI's naming read as Idempotency-Key.
func otherKeySpelling(c *fiber.Ctx) bool {
	found := false
	c.Request().Header.VisitAll(func(k, _ []byte) {
		if !found && len(k) == len(idem.KeyHeader) && !strings.EqualFold(string(k), idem.KeyHeader) && idemhttp.SameCGIHeader(string(k), idem.KeyHeader) {
			found = true
		}
	})
	return found
}

// Options configure New. Runner and Scope are required.
type Options struct {
	// Runner claims keys, stores and replays responses: an *idem.Engine, or a transactional
	// runner (pgstore.TxRunner, …) that runs each handler in the same database transaction as
	// the claim and the stored response. Required.
	Runner idem.Runner
	// Methods are the request methods processed; others pass through. Default POST and PATCH.
	Methods []string
	// RequireKey answers 400 (idemhttp.ProblemMissingKey) to a processed request without a
	// key. Default false: such a request passes through unprotected.
	RequireKey bool
	// Scope returns the caller's scope. Required: without a scope, one caller who sends
	// another's key and body receives the other's stored response. Use a ScopeFunc that
	// returns the caller's stable identity (the account your authentication resolved, or
	// KeyedHeaderScope over an API key), or SingleCaller when one trusted caller is the only
	// one to use the API.
	Scope ScopeFunc
	// Route names the route of a request, stored with the record its key claims for operators
	// (idem.Record.Route: `idem list`, the operator console), cut to idem.MaxRouteLen bytes.
	// It takes no part in what is a duplicate. Default: the method and the path pattern of the
	// route the middleware runs in, when the pattern has parameters ("POST /orders/:id", with
	// app.Post(pattern, mw, handler)), or else the method and the request's path, which may
	// carry identifiers (an order id, an e-mail address) into the store: return a fixed label
	// to keep them out, or "" to store none.
	Route func(c *fiber.Ctx) string
	// MaxResponseBody is the largest response body kept for replay, in bytes. A larger one is
	// sent and the record completed without it. Default DefaultMaxResponseBody (1 MiB).
	MaxResponseBody int
	// StoreRetryAfter is the Retry-After sent with a 503 when the store fails, rounded up to
	// whole seconds. Default 1s.
	StoreRetryAfter time.Duration
	// Logger receives the warnings (store unavailable, a result not stored). Default
	// slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called once per request, as the middleware returns, with what
	// happened to it (for metrics and logs). It must be quick and safe for concurrent use.
	// Spans come from the runner's idem.Options.Observer. Default nil.
	OnEvent func(Event)
}

type middleware struct {
	eng        idem.Runner
	methods    []string
	requireKey bool
	scope      ScopeFunc
	route      func(c *fiber.Ctx) string
	maxBody    int
	retry      string
	log        *slog.Logger
	onEvent    func(Event)
	interned   interned
}

// New returns the middleware. Put it in front of the routes it protects: app.Use, a group, or
// a single route.
func New(opt Options) (fiber.Handler, error) {
	if opt.Runner == nil || opt.Runner == (*idem.Engine)(nil) {
		return nil, optionError("Options.Runner", "is required")
	}
	if opt.Scope == nil {
		return nil, optionError("Options.Scope", "is required: a ScopeFunc that tells callers apart "+
			"(KeyedHeaderScope over an API key, or the account your authentication resolved), "+
			"or SingleCaller() when one trusted caller is the only one to use the API")
	}
	if opt.MaxResponseBody < 0 {
		return nil, optionError("Options.MaxResponseBody", "%d is negative", opt.MaxResponseBody)
	}
	if opt.StoreRetryAfter < 0 {
		return nil, optionError("Options.StoreRetryAfter", "%s is negative", opt.StoreRetryAfter)
	}
	m := &middleware{
		eng:        opt.Runner,
		methods:    opt.Methods,
		requireKey: opt.RequireKey,
		scope:      opt.Scope,
		maxBody:    cmp.Or(opt.MaxResponseBody, DefaultMaxResponseBody),
		retry:      seconds(cmp.Or(opt.StoreRetryAfter, time.Second)),
		log:        cmp.Or(opt.Logger, slog.Default()),
		onEvent:    opt.OnEvent,
	}
	if m.methods == nil {
		m.methods = []string{fiber.MethodPost, fiber.MethodPatch}
	}
	m.route = defaultRoute
	if opt.Route != nil {
		// A route read in place from the request (c.Path()) must not reach the store, which
		// may keep it: fasthttp reuses the request's buffers.
		m.route = func(c *fiber.Ctx) string { return strings.Clone(opt.Route(c)) }
	}
	return m.handle, nil
}

// defaultRoute is Options.Route's default: the method and the path pattern of the route the
// middleware runs in when the pattern has parameters, or else the method and the request's
// path. (A pattern without parameters is the path itself on a route, and only a prefix of it
// in front of the router, as app.Use puts the middleware: "/".)
func defaultRoute(c *fiber.Ctx) string {
	if r := c.Route(); r != nil && strings.ContainsAny(r.Path, ":*+") {
		return c.Method() + " " + r.Path
	}
	return c.Method() + " " + c.Path()
}

// seconds formats d as a Retry-After value: whole seconds, rounded up, at least 1.
func seconds(d time.Duration) string {
	return strconv.FormatInt(max(1, int64((d+time.Second-1)/time.Second)), 10)
}

func (m *middleware) handle(c *fiber.Ctx) error {
	if m.onEvent == nil {
		_, err := m.serve(c)
		return err
	}
	start := time.Now()
	ev, err := m.serve(c)
	ev.Status, ev.Start, ev.Duration = c.Response().StatusCode(), start, time.Since(start)
	ev.Key = strings.Clone(ev.Key) // read in place from the request, which fasthttp reuses
	m.onEvent(ev)
	return err
}

// serve handles a request and says what it did in an Event (Outcome, Key, Takeover, Err).
func (m *middleware) serve(c *fiber.Ctx) (Event, error) {
	if !slices.Contains(m.methods, c.Method()) {
		return Event{Outcome: OutcomeBypass}, c.Next()
	}
	keys := c.Request().Header.PeekAll(idem.KeyHeader)
	if otherKeySpelling(c) {
		// Idempotency_Key: an application that reads CGI names would see a key this
		// middleware did not (see idemhttp.ErrInvalidKey).
		return Event{Outcome: OutcomeInvalidKey}, probInvalidKey.write(c, "")
	}
	switch {
	case len(keys) == 0 || len(keys) == 1 && len(keys[0]) == 0:
		if m.requireKey {
			return Event{Outcome: OutcomeMissingKey}, probMissingKey.write(c, "")
		}
		return Event{Outcome: OutcomeBypass}, c.Next()
	case len(keys) > 1:
		return Event{Outcome: OutcomeInvalidKey}, probInvalidKey.write(c, "")
	}
	// The key is read in place (ParseKey keeps nothing); StorageKey below copies it.
	key, err := idemhttp.ParseKey(unsafe.String(unsafe.SliceData(keys[0]), len(keys[0])))
	if err != nil {
		return Event{Outcome: OutcomeInvalidKey, Err: err}, probInvalidKey.write(c, "")
	}
	scope := ""
	if m.scope != nil {
		scope, err = m.scope(c)
		if err == nil {
			err = idem.CheckScope(scope)
		}
		if err != nil {
			m.log.Warn("idemfiber: could not scope the request", "method", c.Method(), "path", c.Path(), "err", err)
			if errors.Is(err, idemhttp.ErrScopeHeaderSpelling) {
				return Event{Outcome: OutcomeInvalidScope, Key: key, Err: err}, probScopeSpelling.write(c, "")
			}
			return Event{Outcome: OutcomeInvalidScope, Key: key, Err: err}, probInvalidScope.write(c, "")
		}
	}

	r := runs.Get().(*run)
	r.m, r.c = m, c
	defer r.release()
	storageKey, fp := keyAndFingerprint(c, scope, key)
	res, err := m.eng.Run(c.UserContext(), idem.Call{Key: storageKey, Fingerprint: fp, Route: m.route(c)}, r.fn)
	if r.panicked != nil {
		panic(r.panicked) // the outcome is recorded (held as uncertain): let the panic go on
	}
	ev := Event{Key: key, Takeover: res.Takeover, Err: err}
	switch {
	case r.ran:
		// The handler's answer is in c already.
		switch {
		case errors.Is(err, errBegun):
			ev.Outcome, ev.Err = OutcomeUncertain, r.err
		case r.err != nil || !res.Kept:
			ev.Outcome, ev.Err = OutcomeReleased, r.err
		case res.Response.BodyOmitted:
			ev.Outcome = OutcomeOversize
		default:
			ev.Outcome = OutcomeExecuted
		}
		if err != nil && r.err == nil && !errors.Is(err, errBegun) {
			ev.Err = err
			m.log.Warn("idemfiber: handler ran but its result was not stored", "method", c.Method(), "path", c.Path(), "err", err)
		}
		return ev, r.err
	case err == nil && res.Replayed:
		ev.Outcome = OutcomeReplay
		return ev, replay(c, &res.Response)
	case errors.Is(err, idem.ErrMismatch):
		ev.Outcome = OutcomeMismatch
		return ev, probMismatch.write(c, "")
	case errors.Is(err, idem.ErrInFlight):
		var ife *idem.InFlightError
		after := time.Second
		if errors.As(err, &ife) {
			after = ife.RetryAfter
		}
		ev.Outcome = OutcomeInFlight
		return ev, probInFlight.write(c, seconds(after))
	case errors.Is(err, idem.ErrStoreUnavailable):
		m.log.Warn("idemfiber: store unavailable; request refused (fail closed)", "method", c.Method(), "path", c.Path(), "err", err)
		ev.Outcome = OutcomeStoreError
		return ev, probStore.write(c, m.retry)
	default:
		// The caller's context ended while waiting, or an unexpected error: nothing was done.
		if c.UserContext().Err() == nil {
			m.log.Error("idemfiber: unexpected engine error", "method", c.Method(), "path", c.Path(), "err", err)
		}
		ev.Outcome = OutcomeError
		return ev, probInternal.write(c, "")
	}
}

// errBegun is the cause of an uncertain outcome: the handler failed after it began to answer.
var errBegun = errors.New("idemfiber: handler failed after it began to answer")

// run is one execution of the rest of the chain, as the engine's idem.Func.
type run struct {
	m        *middleware
	c        *fiber.Ctx
	ran      bool
	err      error               // the handler's error, returned to Fiber
	panicked any                 // a panic after the handler began to answer
	header   map[string][]string // the captured response headers, reused
}

// runs pools the runs, with their header maps.
var runs = sync.Pool{New: func() any { return &run{header: make(map[string][]string, 4)} }}

// release returns r to its pool. The engine has returned: the store copied what it keeps.
func (r *run) release() {
	h := r.header
	if len(h) > 16 {
		h = make(map[string][]string, 4) // a large map is left to the garbage collector
	}
	clear(h)
	*r = run{header: h}
	runs.Put(r)
}

// begun reports whether the handler began to answer: set a status other than 200, or wrote.
func begun(c *fiber.Ctx) bool {
	resp := c.Response()
	return resp.StatusCode() != fiber.StatusOK || len(resp.Body()) > 0
}

// fn runs the rest of the chain and returns the response to keep. An error or a panic before
// the handler began to answer releases the claim (the panic goes on through the engine); after
// it began, the outcome is uncertain (the panic is kept for handle to raise again).
func (r *run) fn(ctx context.Context) (resp idem.Response, err error) {
	r.ran = true
	c := r.c
	prev := c.UserContext()
	c.SetUserContext(ctx)
	returned := false
	defer func() {
		c.SetUserContext(prev)
		if !returned && begun(c) {
			if r.panicked = recover(); r.panicked != nil { // nil on runtime.Goexit, which goes on
				err = idem.Uncertain(errBegun)
			}
		}
	}()
	r.err = c.Next()
	returned = true
	if r.err != nil {
		if begun(c) {
			return idem.Response{}, idem.Uncertain(errBegun)
		}
		return idem.Response{}, r.err // released: nothing was answered
	}
	return r.m.capture(c, r.header), nil
}
