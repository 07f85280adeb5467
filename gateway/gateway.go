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
// /healthz answers 200 while the process runs; /readyz answers 200 when the store answers.
// Both are served on the proxy's listener (and so shadow the upstream's paths of those names)
// and on the metrics listener, which also serves Prometheus metrics at /metrics.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/storeurl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options carry what the gateway gets from its host program rather than its configuration.
type Options struct {
	// Logger receives one line per processed request (never a body or a secret) and warnings.
	// Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the gateway's metrics; Gatherer serves them at /metrics. Default: a
	// new registry of the gateway's own, also used as the Gatherer.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
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
	fallback http.Handler
	engines  []*idem.Engine
	failures *failures // upstream failures, from the proxy to the event hook
}

type route struct {
	rule    Route
	handler http.Handler
}

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
		reg, gat = r, r
	}
	var err error
	if g.metrics, err = NewMetrics(reg); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	g.gatherer = gat
	if opt.Store != nil {
		g.store = opt.Store
	} else {
		st, err := storeurl.Open(ctx, cfg.Store)
		if err != nil {
			return nil, err
		}
		g.store, g.closer = st, st
	}
	instrumented := instrument(g.store, g.metrics.StoreSeconds)
	upstream, _ := url.Parse(cfg.Upstream)
	transport := opt.Transport
	if transport == nil {
		transport = upstreamTransport()
	}
	px := newProxy(upstream, transport, time.Duration(cfg.UpstreamTimeout), g.log, g.metrics)
	g.failures = px.failures

	if g.fallback, err = g.protect(instrumented, px, Route{}); err != nil {
		g.Close()
		return nil, err
	}
	for i, rule := range cfg.Routes {
		h, err := g.protect(instrumented, px, rule)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("gateway: routes[%d]: %w", i, err)
		}
		g.routes = append(g.routes, route{rule: rule, handler: h})
	}
	return g, nil
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
	})
	if err != nil {
		return nil, err
	}
	g.engines = append(g.engines, eng)
	opt := idemhttp.Options{
		Engine:          eng,
		Methods:         g.cfg.Methods,
		RequireKey:      g.cfg.RequireKey,
		MaxRequestBody:  int64(g.cfg.MaxBody),
		MaxResponseBody: int64(g.cfg.MaxBody),
		ExpiresHeader:   true,
		DetachBody:      true, // the proxy's Transport may read the body after ServeHTTP returns
		OnEvent:         g.event,
		Logger:          g.log,
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
	if h := cmpOr(rule.ScopeHeader, g.cfg.ScopeHeader); h != "" {
		opt.Scope = idemhttp.HeaderScope(h)
	}
	mw, err := idemhttp.New(opt)
	if err != nil {
		return nil, err
	}
	return mw(px), nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// bypass proxies without idempotency, still counting the request.
func (g *Gateway) bypass(px http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		px.ServeHTTP(w, r)
		outcome := idemhttp.OutcomeBypass
		if g.failures.take(r.URL) != 0 {
			outcome = outcomeUpstreamError
		}
		g.metrics.request(outcome)
	})
}

// event turns the middleware's report of a request into a metric and a log line.
func (g *Gateway) event(ev idemhttp.Event) {
	outcome := ev.Outcome
	if g.failures.take(ev.Request.URL) != 0 {
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

// ServeHTTP routes a request: health endpoints, then the first matching route, then the
// gateway's defaults.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		g.healthz(w, r)
		return
	case "/readyz":
		g.readyz(w, r)
		return
	}
	h := g.fallback
	for i := range g.routes {
		if g.routes[i].rule.match(r.Method, r.URL.Path) {
			h = g.routes[i].handler
			break
		}
	}
	h.ServeHTTP(w, r)
	g.failures.take(r.URL) // normally taken by the event hook already; never left behind
}

func (g *Gateway) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// Ready reports whether the store answers within 2 seconds.
func (g *Gateway) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := g.store.Get(ctx, "idem:readyz")
	if err != nil && !errors.Is(err, idem.ErrNotFound) {
		return err
	}
	return nil
}

func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := g.Ready(r.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "store unavailable\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// AdminHandler serves /metrics, /healthz and /readyz, for the metrics listener.
func (g *Gateway) AdminHandler() http.Handler {
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

// Close closes the store if the gateway opened it.
func (g *Gateway) Close() error {
	if g.closer != nil {
		return g.closer.Close()
	}
	return nil
}
