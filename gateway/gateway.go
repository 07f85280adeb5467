// Package gateway is the idem gateway: a reverse proxy that gives any HTTP API, in any
// language, Idempotency-Key semantics (idemhttp) backed by any idem store.
//
// # Behaviour
//
// Requests with a processed method (POST and PATCH by default) and a key run once per key
// (and per tenant, with ScopeHeader): the upstream's response is stored and replayed to every
// retry with Idempotent-Replayed: true. The upstream call is detached from the client's
// connection, so a client that gives up does not cancel the effect and its retry gets the
// stored response. An upstream that cannot be reached (nothing sent) gives 502 and releases the
// key; one that got the request but did not answer gives 502 or 504 and keeps the key in
// flight until its lease runs out (Config.Uncertain), never a silent second execution.
//
// # Operations
//
// /healthz answers 200 while the process runs; /readyz answers 200 when the store answers,
// and 503 from the moment the gateway drains for shutdown (Drain). Both are served on the proxy's listener (and so shadow the upstream's paths of those names)
// and on the metrics listener, which also serves Prometheus metrics at /metrics.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemotel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Options carry what the gateway gets from its host program rather than its configuration.
type Options struct {
	// Logger receives one line per processed request (never a body or a secret) and warnings.
	// Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the gateway's metrics; Gatherer serves them at /metrics. Default: a
	// new registry of the gateway's own, also used as the Gatherer, which also has the Go
	// runtime's metrics (go_*) and the process's (process_*). A Registerer given here gets
	// only the gateway's own; the host registers the runtime's collectors if it wants them.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// Version is the version label of idem_build_info. Default: the main module's version
	// from the binary's build information.
	Version string
	// Store, if set, is used instead of opening Config.Store (and is not closed by Close).
	Store idem.Store
	// Transport sends upstream calls. Default: a Transport tuned for one upstream host.
	Transport http.RoundTripper
}

// Gateway is a configured reverse proxy. Create it with New; serve Handler, or call Serve.
type Gateway struct {
	cfg      Config
	log      *slog.Logger
	store    idem.Store
	closer   io.Closer
	metrics  *Metrics
	gatherer prometheus.Gatherer
	routes   []route
	fallback route
	engines  []*idem.Engine
	budget   *idemhttp.Budget // one memory budget for every route
	secret   []byte           // the key of the scope's HMAC

	draining atomic.Bool               // Drain was called: /readyz answers 503
	format   idemhttp.ProblemFormatter // Config.ErrorBody's; nil: problem+json
	drain    *drainer                  // the upstream calls in flight, and the floors of their claims
	claims   *claimClock               // when each claim in flight began: idem_claims_overdue
	held     *heldCollector            // idem_keys_held (nil: the store cannot list)

	// With OTLP export (Config.OTLPEndpoint): the providers flushed by Close, the engines'
	// observer, and the gateway's handler under a server span continuing the caller's trace
	// (and measuring http.server.request.duration).
	tracer   *sdktrace.TracerProvider
	meter    *sdkmetric.MeterProvider
	observer idem.Observer
	traced   http.Handler
	// traceUpstream wraps the upstream transport in a client span whose context is sent to
	// the upstream, when tracing or OTLP metrics are on.
	traceUpstream func(http.RoundTripper) http.RoundTripper
}

// route is a rule with its handler and what a request needs to be checked against it.
type route struct {
	rule     Route
	pattern  string   // rule.Path in canonical form (canonicalPattern)
	identity []string // headers that identify the request (key, scope): never hop-by-hop
	handler  http.Handler
}

// Problem types of the answers the gateway itself gives to requests it refuses before the
// idempotency middleware sees them (application/problem+json, 400 unless said otherwise).
const (
	// ProblemAmbiguousPath: a processed request's path has an encoded slash or backslash
	// (%2F, %5C), a backslash or a control character, which an upstream may split into
	// segments otherwise than the gateway does when it picks the route's rule.
	ProblemAmbiguousPath = "https://idemkit.dev/problems/ambiguous-path"
	// ProblemMethodCase: the method is a processed one in other letter case (post for POST).
	// Methods are case-sensitive (RFC 9110 §9.1), so the gateway does not process it, and an
	// upstream that reads it as POST would run it unprotected: it is refused.
	ProblemMethodCase = "https://idemkit.dev/problems/method-case"
	// ProblemHopByHopIdentity: the Connection header names the idempotency key's header or the
	// scope's, which would make the gateway key on a header that it then strips before the
	// upstream.
	ProblemHopByHopIdentity = "https://idemkit.dev/problems/hop-by-hop-identity"
	// ProblemHTTP2Preface (505): the HTTP/2 connection preface (PRI * HTTP/2.0) sent to a
	// gateway that does not accept HTTP/2 without TLS (Config.H2C off).
	ProblemHTTP2Preface = "https://idemkit.dev/problems/http2-preface"
	// ProblemUpstream (502, or 504 on a timeout): the upstream call failed. The title says
	// whether the request was sent (it may have been processed: the key is held, retry later
	// with the same key) or never left (the key is released: a retry executes).
	ProblemUpstream = "https://idemkit.dev/problems/upstream"
)

// outcomeRefused labels a request the gateway refused before the middleware (the problems
// above).
const outcomeRefused = "refused"

// New builds a gateway from cfg (defaults applied, then validated) and opens its store.
func New(ctx context.Context, cfg Config, opt Options) (*Gateway, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, log: opt.Logger}
	if g.log == nil {
		g.log = slog.Default()
	}
	reg, gat := opt.Registerer, opt.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg, gat = r, r
	}
	var err error
	if g.metrics, err = newMetrics(reg, opt.Version); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	g.gatherer = gat
	if tracing, metering := cfg.tracingEnabled(), cfg.metricsEnabled(); tracing || metering {
		if err := g.openTelemetry(ctx, cfg, opt, tracing, metering); err != nil {
			g.Close()
			return nil, err
		}
	}
	if opt.Store != nil {
		g.store = opt.Store
	} else {
		st, err := openStore(ctx, cfg.Store, time.Duration(cfg.WaitForStore), g.log)
		if err != nil {
			g.Close()
			return nil, err
		}
		g.store, g.closer = st, st
	}
	if g.secret, err = cfg.LoadScopeSecret(); err != nil {
		g.Close()
		return nil, err
	}
	instrumented := instrument(g.store, g.metrics.StoreSeconds)
	g.drain = newDrainer(cfg.UncertainPolicy(), time.Duration(cfg.Lease), instrumented, g.log)
	instrumented = &floorStore{Store: instrumented, d: g.drain}
	if err := g.registerClaimGauges(reg); err != nil {
		g.Close()
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	upstream, _ := url.Parse(cfg.Upstream)
	transport := opt.Transport
	if transport == nil {
		transport = upstreamTransport()
	}
	if g.traceUpstream != nil {
		transport = g.traceUpstream(transport)
	}
	if cfg.ErrorBody != nil {
		if g.format, err = cfg.ErrorBody.formatter(); err != nil {
			g.Close()
			return nil, err
		}
	}
	px := newProxy(upstream, transport, time.Duration(cfg.UpstreamTimeout), g.log, g.metrics, g.drain)
	px.format = g.format
	// One budget bounds the buffers of all routes together, not each route's alone. Its
	// default is the middleware's: DefaultMemoryBudget, or 4 × the two body limits if larger.
	budget := int64(cfg.MemoryBudget)
	switch {
	case budget == 0 && cfg.MaxBody >= 1<<58:
		budget = -1 // no budget could serve one request at such limits
	case budget == 0:
		budget = max(idemhttp.DefaultMemoryBudget, 4*2*int64(cfg.MaxBody))
	}
	g.budget = idemhttp.NewBudget(budget)

	if g.fallback, err = g.route(instrumented, px, Route{}); err != nil {
		g.Close()
		return nil, err
	}
	for i, rule := range cfg.Routes {
		rt, err := g.route(instrumented, px, rule)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("gateway: routes[%d]: %w", i, err)
		}
		g.routes = append(g.routes, rt)
	}
	return g, nil
}

// route builds the route of a rule.
func (g *Gateway) route(st idem.Store, px http.Handler, rule Route) (route, error) {
	h, err := g.protect(st, px, rule)
	if err != nil {
		return route{}, err
	}
	rt := route{rule: rule, pattern: "/*", handler: h, identity: []string{idem.KeyHeader}}
	if rule.Path != "" {
		rt.pattern = canonicalPattern(rule.Path)
	}
	if rule.KeyHeader != "" {
		rt.identity = append(rt.identity, rule.KeyHeader)
	}
	if sh := g.scopeHeader(rule); sh != "" {
		rt.identity = append(rt.identity, sh)
	}
	return rt, nil
}

// scopeHeader is the header that scopes a rule's requests ("" for none).
func (g *Gateway) scopeHeader(rule Route) string {
	if g.cfg.Scope == ScopeNone && rule.ScopeHeader == "" {
		return ""
	}
	return cmp.Or(rule.ScopeHeader, g.cfg.ScopeHeader)
}

// LoadScopeSecret returns the key of the scope's HMAC: ScopeSecret, or the content of
// ScopeSecretFile without its trailing newline; nil when neither is set. It fails if the file
// cannot be read or the secret is shorter than MinScopeSecret. With it and
// idemhttp.KeyedStorageKey, a tool finds the record the gateway keeps for a scope header's value.
func (c Config) LoadScopeSecret() ([]byte, error) {
	secret := c.ScopeSecret
	if c.ScopeSecretFile != "" {
		b, err := os.ReadFile(c.ScopeSecretFile)
		if err != nil {
			return nil, fmt.Errorf("config: scope_secret_file: %w", err)
		}
		secret = strings.TrimRight(string(b), "\r\n")
	}
	if secret == "" {
		return nil, nil
	}
	if len(secret) < MinScopeSecret {
		return nil, configError("scope_secret_file", "holds %d bytes, fewer than %d", len(secret), MinScopeSecret)
	}
	return []byte(secret), nil
}

// protect returns the proxy wrapped in the idempotency middleware configured for rule.
func (g *Gateway) protect(st idem.Store, px http.Handler, rule Route) (http.Handler, error) {
	if rule.Mode == "off" {
		return g.bypass(px), nil
	}
	policy := idem.DefaultPolicy
	if g.cfg.Store5xx {
		policy = idem.StoreServerErrors
	}
	ttl := time.Duration(g.cfg.TTL)
	if rule.TTL > 0 {
		ttl = time.Duration(rule.TTL)
	}
	eng, err := idem.New(st, idem.Options{
		Lease:     time.Duration(g.cfg.Lease),
		TTL:       max(ttl, time.Duration(g.cfg.Lease)),
		Wait:      time.Duration(g.cfg.Wait),
		Policy:    policy,
		CacheSize: max(g.cfg.Cache, 0),
		Uncertain: g.cfg.UncertainPolicy(),
		Logger:    g.log,
		Observer:  claimObserver{next: g.observer, claims: g.metrics.ClaimsInFlight, clock: g.claims},
	})
	if err != nil {
		return nil, err
	}
	g.engines = append(g.engines, eng)
	opt := idemhttp.Options{
		Runner:          eng,
		Methods:         g.cfg.Methods,
		RequireKey:      g.cfg.RequireKey,
		MaxRequestBody:  int64(g.cfg.MaxBody),
		MaxResponseBody: int64(g.cfg.MaxBody),
		Budget:          g.budget,
		ExpiresHeader:   true,
		DetachBody:      true, // the proxy's Transport may read the body after ServeHTTP returns
		OnEvent:         g.event,
		Logger:          g.log,
		FormatProblem:   g.format,
	}
	switch rule.Mode {
	case "required":
		opt.RequireKey = true
	case "optional":
		opt.RequireKey = false
	}
	switch {
	case rule.KeyHeader != "":
		opt.Key = idemhttp.HeaderKey(rule.KeyHeader)
	case rule.KeyJSONField != "":
		opt.Key = idemhttp.JSONKey(rule.KeyJSONField)
	}
	if rule.Fingerprint == "json" {
		opt.Fingerprint = idemhttp.JSONFingerprint(rule.IgnoreFields...)
	}
	if h := g.scopeHeader(rule); h != "" {
		if g.secret == nil {
			return nil, configError("scope_secret", "is required with a scope header (or scope_secret_file): the key of its HMAC")
		}
		opt.Scope = idemhttp.KeyedHeaderScope(h, g.secret)
	} else {
		opt.Scope = idemhttp.SingleCaller() // the configuration declared one trusted caller (scope: none)
	}
	if opt.Fingerprint == nil {
		opt.Fingerprint = idemhttp.RawFingerprint
	}
	opt.Fingerprint = hostFingerprint(opt.Fingerprint)
	opt.Route = ruleRoute(rule)
	if g.cfg.RetainRequest {
		opt.RetainRequest, opt.MaxRetainedRequest = true, int64(g.cfg.RetainRequestMax)
		for _, h := range []string{g.cfg.ScopeHeader, rule.ScopeHeader} {
			if h != "" {
				opt.RedactHeaders = append(opt.RedactHeaders, h) // a scope header is an identity
			}
		}
	}
	mw, err := idemhttp.New(opt)
	if err != nil {
		return nil, err
	}
	return mw(px), nil
}

// hostFingerprint adds the request's host name (hostName: lower case, without port or
// trailing dot) to the fingerprint fp computes. A gateway in front of several virtual hosts so never replays one
// host's response to a request for another: the same key sent to another host is a mismatch
// (422). The host is part of the fingerprint rather than of the scope so that it can never
// cause a second execution: a client that retries through another name of the same API gets a
// 422, not a new effect; tenants are kept apart by the scope header.
func hostFingerprint(fp idemhttp.FingerprintFunc) idemhttp.FingerprintFunc {
	return func(r *http.Request, body []byte) (string, error) {
		sum, err := fp(r, body)
		if err != nil {
			return "", err
		}
		return idem.Fingerprint([]byte(sum), []byte(hostName(r.Host))), nil
	}
}

// bypass proxies without idempotency, still counting the request.
func (g *Gateway) bypass(px http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		px.ServeHTTP(w, r)
		outcome := idemhttp.OutcomeBypass
		if failed(r.Context()) {
			outcome = outcomeUpstreamError
		}
		g.metrics.request(outcome)
	})
}

// event turns the middleware's report of a request into a metric and a log line.
func (g *Gateway) event(ev idemhttp.Event) {
	outcome := ev.Outcome
	if failed(ev.Request.Context()) {
		outcome = outcomeUpstreamError
	}
	g.metrics.request(outcome)
	if ev.Outcome == idemhttp.OutcomeBypass {
		return
	}
	level := slog.LevelInfo
	if ev.Err != nil || outcome == outcomeUpstreamError || ev.Outcome == idemhttp.OutcomeStoreError {
		level = slog.LevelWarn
	}
	if !g.log.Enabled(ev.Request.Context(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("outcome", string(outcome)), slog.String("method", ev.Request.Method),
		slog.String("path", ev.Request.URL.Path), slog.Int("status", ev.Status),
		slog.String("key", ev.Key), slog.Duration("duration", ev.Duration),
	}
	if ev.Takeover {
		attrs = append(attrs, slog.Bool("takeover", true))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("err", ev.Err.Error()))
	}
	g.log.LogAttrs(ev.Request.Context(), level, "request", attrs...)
}

// hostName is the name of a Host header value: without its port (gateways of one store listen
// on different ports, and a client may fail over from one to another), its IPv6 brackets or a
// trailing dot, in lower case.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return lowerASCII(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
}

// ServeHTTP routes a request: health endpoints, then the first route whose rule matches the
// request's method and canonical path (canonicalPath), then the gateway's defaults. Before
// that it refuses with 400 what it could not protect as the client meant: a processed method
// in other letter case, a processed request with an ambiguous path, and one whose Connection
// header names its key's or scope's header.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.traced != nil && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
		g.traced.ServeHTTP(w, r)
		return
	}
	g.serveHTTP(w, r)
}

func (g *Gateway) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		g.healthz(w, r)
		return
	case "/readyz":
		g.readyz(w, r)
		return
	}
	if r.Method == "PRI" && r.ProtoMajor == 2 {
		g.refuse(w, r, http.StatusHTTPVersionNotSupported, ProblemHTTP2Preface, "HTTP/2 without TLS is not enabled on this gateway")
		return
	}
	processed := g.processes(r.Method)
	if !processed && g.processesFolded(r.Method) {
		g.refuse(w, r, http.StatusBadRequest, ProblemMethodCase, "Methods are case-sensitive: send "+strings.ToUpper(r.Method)+", not "+r.Method)
		return
	}
	if processed && ambiguousPath(r.URL.EscapedPath()) {
		g.refuse(w, r, http.StatusBadRequest, ProblemAmbiguousPath, "The path has an encoded slash or backslash, a backslash or a control character")
		return
	}
	canonical := canonicalPath(r.URL.Path)
	rt := &g.fallback
	for i := range g.routes {
		if g.routes[i].match(r.Method, canonical) {
			rt = &g.routes[i]
			break
		}
	}
	if processed && rt.rule.Mode != "off" {
		if name := hopByHop(r.Header, rt.identity); name != "" {
			g.refuse(w, r, http.StatusBadRequest, ProblemHopByHopIdentity, "The Connection header names "+name+", which identifies the request")
			return
		}
	}
	if g.traced != nil && rt != &g.fallback {
		idemotel.Route(r.Context(), rt.rule.Path)
	}
	r, o := withOutcome(r)
	defer g.drain.end(o) // if its effect or upstream call began (registered, in this goroutine)
	rt.handler.ServeHTTP(w, r)
}

// processes reports whether method is one of the processed methods.
func (g *Gateway) processes(method string) bool {
	for _, m := range g.cfg.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// processesFolded reports whether method is a processed method in any letter case.
func (g *Gateway) processesFolded(method string) bool {
	for _, m := range g.cfg.Methods {
		if strings.EqualFold(m, method) {
			return true
		}
	}
	return false
}

// hopByHop returns the first of names that the Connection header lists ("" for none): a
// header so named is removed before the upstream, so the gateway must not key on it.
func hopByHop(h http.Header, names []string) string {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			tok = strings.TrimSpace(tok)
			for _, n := range names {
				if strings.EqualFold(tok, n) {
					return n
				}
			}
		}
	}
	return ""
}

// refuse answers status with a problem of type typ, and counts the request as refused.
func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, status int, typ, title string) {
	g.format.Write(w, idemhttp.Problem{Status: status, Type: typ, Title: title})
	g.metrics.request(outcomeRefused)
	g.log.LogAttrs(r.Context(), slog.LevelInfo, "request refused", slog.String("problem", typ),
		slog.String("method", r.Method), slog.String("path", r.URL.EscapedPath()))
}

func (g *Gateway) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// ErrDraining is what Ready returns once the gateway drains for shutdown.
var ErrDraining = errors.New("gateway: draining for shutdown")

// Drain marks the gateway as shutting down: from then on /readyz answers 503 (and Ready
// returns ErrDraining), so that load balancers stop sending it new requests, while the
// requests it gets are still served. The host calls it on the first SIGTERM, before it stops
// accepting connections and waits for the requests in flight. It cannot be undone.
//
// Drain also makes sure that no claim lapses while its upstream call may still run, whenever
// the process ends: every claim whose upstream call is out (now, or sent later) has its lease
// extended once, with the store's Extend, to a floor that Config.Uncertain sets — hold: the
// record's expiry (it stays held until `idem release`, as an uncertain outcome); expire: the
// call's deadline plus the lease; release: the call's deadline plus a second — and the
// heartbeat's later extensions never shorten it. A call that ends before the process does
// completes or releases its claim as usual. Drain returns once the floors are written.
func (g *Gateway) Drain() {
	g.draining.Store(true)
	g.drain.drain()
}

// Abort ends the upstream calls still out, for a drain that ran out of time (or a second
// signal): each of their requests is answered 503 with ProblemShuttingDown, and its claim
// follows Config.Uncertain from the floor Drain gave it (a release waits for the call's
// deadline, by letting the lease lapse there). It waits until those requests' handlers have
// returned, or ctx ends, and returns how many requests were in flight. Call Drain first.
func (g *Gateway) Abort(ctx context.Context) int {
	g.Drain()
	return g.drain.abort(ctx)
}

// Ready reports whether the gateway should get traffic: ErrDraining after Drain, else the
// store's error if it does not answer within 2 seconds.
func (g *Gateway) Ready(ctx context.Context) error {
	if g.draining.Load() {
		return ErrDraining
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := g.store.Get(ctx, readyKey)
	if err != nil && !errors.Is(err, idem.ErrNotFound) {
		return err
	}
	return nil
}

func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := g.Ready(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		if errors.Is(err, ErrDraining) {
			_, _ = io.WriteString(w, "draining\n")
			return
		}
		_, _ = io.WriteString(w, "store unavailable\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// OpsHandler serves the operations endpoints, /metrics, /healthz and /readyz, for the metrics
// listener (--metrics-listen).
func (g *Gateway) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", g.healthz)
	mux.HandleFunc("GET /readyz", g.readyz)
	return mux
}

// Store returns the gateway's store (instrumented calls go through the middleware).
func (g *Gateway) Store() idem.Store { return g.store }

// Metrics returns the gateway's metrics.
func (g *Gateway) Metrics() *Metrics { return g.metrics }

// Close sends the spans not yet exported (waiting up to 5 seconds for the collector) and
// closes the store if the gateway opened it.
func (g *Gateway) Close() error {
	var err error
	if g.tracer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if e := g.tracer.Shutdown(ctx); e != nil {
			err = fmt.Errorf("gateway: flushing traces: %w", e)
		}
		cancel()
	}
	if g.meter != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if e := g.meter.Shutdown(ctx); e != nil {
			err = errors.Join(err, fmt.Errorf("gateway: flushing metrics: %w", e))
		}
		cancel()
	}
	if g.closer != nil {
		err = errors.Join(err, g.closer.Close())
	}
	return err
}
