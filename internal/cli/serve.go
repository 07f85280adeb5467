package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/idemkit/idem/gateway"
	"github.com/idemkit/idem/store/storeurl"
	"github.com/idemkit/idem/store/sweeper"
)

func init() {
	register("serve", "run the gateway in front of an upstream API", runServe)
}

// serveFlags binds every Config field to a flag. Each flag's default comes from its IDEM_*
// environment variable, so the precedence is flag > environment > config file > default:
// values still at their zero after parsing are filled from the file.
type serveFlags struct {
	config  string
	cfg     gateway.Config
	set     map[string]bool
	console consoleFlags
}

func bindServe(e *env, fs *flag.FlagSet) *serveFlags {
	f := &serveFlags{set: map[string]bool{}}
	c := &f.cfg
	envs := func(name string) string {
		return e.getenv("IDEM_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
	}
	str := func(p *string, name, usage string) {
		fs.StringVar(p, name, envs(name), usage+" (env IDEM_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))+")")
	}
	fs.StringVar(&f.config, "config", e.getenv("IDEM_CONFIG"), "YAML config file; flags and IDEM_* variables override it (env IDEM_CONFIG)")
	str(&c.Listen, "listen", "address to serve on (default 127.0.0.1:8080)")
	str(&c.Upstream, "upstream", "URL of the API behind the gateway (required)")
	str(&c.Store, "store", "store URL, default "+defaultStore+": "+storeSchemes())
	str(&c.ScopeHeader, "scope-header", "header naming the caller, hashed (HMAC under --scope-secret) into the key's scope: a stable identity such as an API key, not a rotating token; this or --scope none is required")
	str(&c.Scope, "scope", "none: keys are global, for a gateway one trusted caller uses (excludes --scope-header)")
	// Not str: its environment variable must not become a default that -h prints.
	fs.StringVar(&c.ScopeSecret, "scope-secret", "", "key of the scope's HMAC, at least 16 bytes, shared by the gateways of one store and kept apart from it; a command line is visible to other users of the machine: prefer --scope-secret-file or the environment (env IDEM_SCOPE_SECRET)")
	str(&c.ScopeSecretFile, "scope-secret-file", "file holding the scope secret (a trailing newline is ignored)")
	str(&c.MetricsListen, "metrics-listen", "address for /metrics, /healthz and /readyz (default: none)")
	str(&c.OTLPEndpoint, "otlp-endpoint", "send OpenTelemetry traces and metrics over OTLP/HTTP to this collector URL, such as http://collector:4318 (/v1/traces and /v1/metrics added); /metrics stays; the standard OTEL_EXPORTER_OTLP_* and OTEL_* variables also apply, such as OTEL_METRIC_EXPORT_INTERVAL (default: none, unless OTEL_EXPORTER_OTLP_ENDPOINT is set)")
	str(&c.LogFormat, "log-format", "text or json (default text)")
	str(&c.LogLevel, "log-level", "debug, info (default: a line per processed request), warn or error")
	str(&c.Uncertain, "uncertain", "when the upstream got the request but did not answer: expire (default), release or hold")
	fs.Func("ttl", "how long responses are replayed (default 24h) (env IDEM_TTL)", durationFlag(&c.TTL))
	fs.Func("lease", "how long a claim holds before another gateway may take over (default 30s) (env IDEM_LEASE)", durationFlag(&c.Lease))
	fs.Func("wait", "wait up to this long for an in-flight original instead of answering 409 (default 0) (env IDEM_WAIT)", durationFlag(&c.Wait))
	fs.Func("upstream-timeout", "bound on one upstream call (default 60s) (env IDEM_UPSTREAM_TIMEOUT)", durationFlag(&c.UpstreamTimeout))
	fs.Func("shutdown-timeout", "bound on draining in-flight requests at shutdown; calls still out then get 503 and their keys follow --uncertain (default upstream-timeout + 5s) (env IDEM_SHUTDOWN_TIMEOUT)", durationFlag(&c.ShutdownTimeout))
	fs.Func("shutdown-delay", "after the first SIGTERM/SIGINT, keep serving this long with /readyz at 503 before the drain, for load balancers to stop sending (default 5s in Kubernetes, else 0) (env IDEM_SHUTDOWN_DELAY)", func(s string) error {
		f.set["shutdown-delay"] = true
		return durationFlag(&c.ShutdownDelay)(s)
	})
	fs.Func("wait-for-store", "at startup, keep trying to reach a store that does not answer for this long, logging each attempt, before exiting (default 0: exit at once) (env IDEM_WAIT_FOR_STORE)", durationFlag(&c.WaitForStore))
	fs.Func("read-timeout", "bound on reading a whole request, headers and body (default 60s) (env IDEM_READ_TIMEOUT)", durationFlag(&c.ReadTimeout))
	fs.Func("write-timeout", "bound from a request's headers to the end of its answer; the upstream call is not cut and its result is still stored (default upstream-timeout + wait + 30s) (env IDEM_WRITE_TIMEOUT)", durationFlag(&c.WriteTimeout))
	fs.Func("idle-timeout", "close a keep-alive connection idle this long (default 90s) (env IDEM_IDLE_TIMEOUT)", durationFlag(&c.IdleTimeout))
	fs.Func("max-body", "largest request body, and largest response body kept (default 1MiB) (env IDEM_MAX_BODY)", func(s string) error {
		n, err := gateway.ParseByteSize(s)
		c.MaxBody = gateway.ByteSize(n)
		return err
	})
	fs.BoolFunc("retain-request", "keep what each client sent (method, path, headers, body's first bytes; credentials redacted) with its record, for idem inspect and the console (env IDEM_RETAIN_REQUEST=1)", func(s string) error {
		c.RetainRequest = s == "true"
		f.set["retain-request"] = true
		return nil
	})
	fs.Func("retain-request-max", "bytes each retained request takes at most, as stored (default 4KiB) (env IDEM_RETAIN_REQUEST_MAX)", func(s string) error {
		n, err := gateway.ParseByteSize(s)
		c.RetainRequestMax = gateway.ByteSize(n)
		return err
	})
	fs.Func("memory-budget", "bytes of request and response bodies held at once across requests; over it, 503 before anything runs (default 64MiB or 8 × max-body; -1: unlimited) (env IDEM_MEMORY_BUDGET)", func(s string) error {
		if strings.TrimSpace(s) == "-1" {
			c.MemoryBudget = -1
			return nil
		}
		n, err := gateway.ParseByteSize(s)
		c.MemoryBudget = gateway.ByteSize(n)
		return err
	})
	fs.Func("cache", "completed responses kept in memory for hot replays (default 10000, -1: none) (env IDEM_CACHE)", func(s string) error {
		n, err := strconv.Atoi(s)
		c.Cache = n
		return err
	})
	fs.Func("methods", "comma-separated methods to process (default POST,PATCH) (env IDEM_METHODS)", func(s string) error {
		c.Methods = strings.Split(s, ",")
		return nil
	})
	fs.BoolFunc("require-key", "answer 400 to a processed request without a key (env IDEM_REQUIRE_KEY=1)", func(s string) error {
		c.RequireKey = s == "true"
		f.set["require-key"] = true
		return nil
	})
	fs.BoolFunc("store-5xx", "keep and replay upstream 5xx answers, as Stripe does (env IDEM_STORE_5XX=1)", func(s string) error {
		c.Store5xx = s == "true"
		f.set["store-5xx"] = true
		return nil
	})
	fs.BoolFunc("h2c", "also accept HTTP/2 without TLS (prior knowledge), as a load balancer or sidecar may send it (env IDEM_H2C=1)", func(s string) error {
		c.H2C = s == "true"
		f.set["h2c"] = true
		return nil
	})
	f.console.bind(e, fs, c)
	return f
}

func durationFlag(p *gateway.Duration) func(string) error {
	return func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q is not a duration (like 30s or 24h)", s)
		}
		*p = gateway.Duration(d)
		return nil
	}
}

// resolve applies environment variables for the flags not given, then the config file under
// both.
func (f *serveFlags) resolve(e *env, fs *flag.FlagSet) (gateway.Config, error) {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for name, target := range map[string]func(string) error{
		"ttl": durationFlag(&f.cfg.TTL), "lease": durationFlag(&f.cfg.Lease), "wait": durationFlag(&f.cfg.Wait),
		"upstream-timeout": durationFlag(&f.cfg.UpstreamTimeout), "shutdown-timeout": durationFlag(&f.cfg.ShutdownTimeout),
		"read-timeout": durationFlag(&f.cfg.ReadTimeout), "write-timeout": durationFlag(&f.cfg.WriteTimeout),
		"idle-timeout": durationFlag(&f.cfg.IdleTimeout), "wait-for-store": durationFlag(&f.cfg.WaitForStore),
		"shutdown-delay":     func(s string) error { return fs.Lookup("shutdown-delay").Value.Set(s) },
		"max-body":           func(s string) error { return fs.Lookup("max-body").Value.Set(s) },
		"retain-request-max": func(s string) error { return fs.Lookup("retain-request-max").Value.Set(s) },
		"methods":            func(s string) error { return fs.Lookup("methods").Value.Set(s) },
		"cache":              func(s string) error { return fs.Lookup("cache").Value.Set(s) },
	} {
		v := e.getenv("IDEM_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
		if v != "" && !given[name] {
			if err := target(v); err != nil {
				return gateway.Config{}, usageError("IDEM_%s: %v", strings.ToUpper(strings.ReplaceAll(name, "-", "_")), err)
			}
		}
	}
	if v := e.getenv("IDEM_SCOPE_SECRET"); v != "" && !given["scope-secret"] {
		f.cfg.ScopeSecret = v
	}
	for name, p := range map[string]*bool{"require-key": &f.cfg.RequireKey, "store-5xx": &f.cfg.Store5xx, "h2c": &f.cfg.H2C, "retain-request": &f.cfg.RetainRequest} {
		if v := e.getenv("IDEM_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))); v != "" && !given[name] {
			*p, f.set[name] = v == "1" || strings.EqualFold(v, "true"), true
		}
	}
	cfg := f.cfg
	if f.config != "" {
		file, err := gateway.LoadFile(f.config)
		if err != nil {
			return gateway.Config{}, err
		}
		cfg = merge(f.cfg, file, f.set)
		// A file that sets shutdown_delay, to 0 too, has decided it.
		if file.ShutdownDelay != 0 || fileSets(f.config, "shutdown_delay") {
			f.set["shutdown-delay"] = true
		}
	}
	// In Kubernetes, endpoints take a few seconds to drop a terminating pod: keep serving
	// meanwhile, unless told otherwise.
	if !f.set["shutdown-delay"] && e.getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg.ShutdownDelay = gateway.Duration(5 * time.Second)
	}
	// The console serves where the flags, the environment or the file put it.
	f.console.listen, f.console.tokenFile = cfg.ConsoleListen, cfg.ConsoleTokenFile
	return cfg, nil
}

// fileSets reports whether the YAML config file at path has the top-level key (which
// gateway.LoadFile has already read without error).
func fileSets(path, key string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var keys map[string]any
	if yaml.Unmarshal([]byte(os.ExpandEnv(string(b))), &keys) != nil {
		return false
	}
	_, ok := keys[key]
	return ok
}

// merge fills the fields of over that are unset from base.
func merge(over, base gateway.Config, set map[string]bool) gateway.Config {
	s := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	d := func(a, b gateway.Duration) gateway.Duration {
		if a != 0 {
			return a
		}
		return b
	}
	c := base
	c.Listen, c.Upstream, c.Store = s(over.Listen, base.Listen), s(over.Upstream, base.Upstream), s(over.Store, base.Store)
	c.ScopeHeader, c.MetricsListen = s(over.ScopeHeader, base.ScopeHeader), s(over.MetricsListen, base.MetricsListen)
	c.Scope, c.ScopeSecret, c.ScopeSecretFile = s(over.Scope, base.Scope), s(over.ScopeSecret, base.ScopeSecret), s(over.ScopeSecretFile, base.ScopeSecretFile)
	c.LogFormat, c.Uncertain = s(over.LogFormat, base.LogFormat), s(over.Uncertain, base.Uncertain)
	c.LogLevel, c.OTLPEndpoint = s(over.LogLevel, base.LogLevel), s(over.OTLPEndpoint, base.OTLPEndpoint)
	c.ConsoleListen, c.ConsoleTokenFile = s(over.ConsoleListen, base.ConsoleListen), s(over.ConsoleTokenFile, base.ConsoleTokenFile)
	c.TTL, c.Lease, c.Wait = d(over.TTL, base.TTL), d(over.Lease, base.Lease), d(over.Wait, base.Wait)
	c.UpstreamTimeout, c.ShutdownTimeout = d(over.UpstreamTimeout, base.UpstreamTimeout), d(over.ShutdownTimeout, base.ShutdownTimeout)
	c.ReadTimeout, c.WriteTimeout = d(over.ReadTimeout, base.ReadTimeout), d(over.WriteTimeout, base.WriteTimeout)
	c.IdleTimeout, c.WaitForStore = d(over.IdleTimeout, base.IdleTimeout), d(over.WaitForStore, base.WaitForStore)
	if set["shutdown-delay"] {
		c.ShutdownDelay = over.ShutdownDelay
	}
	if over.Cache != 0 {
		c.Cache = over.Cache
	}
	if over.MaxBody != 0 {
		c.MaxBody = over.MaxBody
	}
	if over.MemoryBudget != 0 {
		c.MemoryBudget = over.MemoryBudget
	}
	if over.RetainRequestMax != 0 {
		c.RetainRequestMax = over.RetainRequestMax
	}
	if set["retain-request"] {
		c.RetainRequest = over.RetainRequest
	}
	if len(over.Methods) > 0 {
		c.Methods = over.Methods
	}
	if set["require-key"] {
		c.RequireKey = over.RequireKey
	}
	if set["store-5xx"] {
		c.Store5xx = over.Store5xx
	}
	if set["h2c"] {
		c.H2C = over.H2C
	}
	return c
}

func newLogger(w io.Writer, format, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by Config.Validate; "" is info
	opt := &slog.HandlerOptions{Level: l}
	if format == "json" {
		opt.ReplaceAttr = durationText
		return slog.New(slog.NewJSONHandler(w, opt))
	}
	return slog.New(slog.NewTextHandler(w, opt))
}

// durationText writes a duration in a JSON log as the text handler does ("1.5s"), not as
// slog's JSON default of integer nanoseconds, which a reader cannot tell from a count.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

func runServe(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "serve", "--upstream URL [flags]")
	f := bindServe(e, fs)
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprintln(e.stderr, "\nLogs go to stderr: info lines in batches, at most 100ms late; warnings and errors at once.")
		fmt.Fprintln(e.stderr, "\nProfiling (off by default): IDEM_CPUPROFILE=FILE writes a CPU profile of the whole run\nto FILE at exit, for go tool pprof.")
	}
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("unexpected arguments: %v", pos)
	}
	cfg, err := f.resolve(e, fs)
	if err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return usageError("%v", err)
	}
	buf := newLogBuffer(e.stderr)
	stopFlush := buf.start()
	defer stopFlush()
	logAt := func(level string) *slog.Logger {
		return slog.New(flushHandler{newLogger(buf, cfg.LogFormat, level).Handler(), buf})
	}
	log := logAt(cfg.LogLevel)
	// The store clients' own lines (go-redis, the MySQL driver, the AWS SDK) come out in the
	// same format. While serve waits for the store, those below error only repeat, four or
	// five times an attempt, the cause that each "store unreachable" line gives: they are
	// dropped then, unless the level is debug.
	clients := log
	if !log.Enabled(ctx, slog.LevelDebug) {
		clients = logAt("error")
	}
	storeurl.SetLogger(clients)
	if path := e.getenv("IDEM_CPUPROFILE"); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			return err
		}
		defer stop()
		log.Info("writing a CPU profile until exit", "file", path)
	}
	con, err := f.console.sidecar(e)
	if err != nil {
		return err
	}
	ctx, second, stop := signalContext(ctx)
	defer stop()
	return serve(ctx, second, cfg, log, func(serveAddrs) { storeurl.SetLogger(log) }, con)
}

// serveAddrs is where serve listens, for its ready callback.
type serveAddrs struct {
	addr        string // the gateway's
	metricsAddr string // --metrics-listen's, "" without
}

// startCPUProfile profiles the process's CPU into the file at path until the returned func
// is called (at exit, after the drain). It is for finding where a request's CPU goes in the
// real gateway (`go tool pprof bin/idem FILE`); off unless IDEM_CPUPROFILE names a file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("IDEM_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("IDEM_CPUPROFILE: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// serve runs the gateway until ctx ends (first signal), then drains: /readyz answers 503 from
// then on, it stops accepting, lets in-flight requests finish (bounded by ShutdownTimeout) so
// their claims are completed or released, and returns. A value on second exits at once. The
// store is waited for up to WaitForStore at startup. Each non-nil sidecar starts once the
// gateway is built and stops after the drain.
func serve(ctx context.Context, second <-chan os.Signal, cfg gateway.Config, log *slog.Logger, ready func(serveAddrs), sidecars ...sidecar) error {
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(cfg.WaitForStore))
	g, err := gateway.New(openCtx, cfg, gateway.Options{Logger: log, Version: version()})
	cancel()
	if err != nil {
		return redactError(err, cfg.Store)
	}
	defer func() {
		if err := g.Close(); err != nil {
			log.Warn("closing the gateway", "err", err)
		}
	}()
	for _, start := range sidecars {
		if start == nil {
			continue
		}
		stop, err := start(g, cfg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	srv := newServer(cfg, g, log)
	if cfg.H2C {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	var admin *http.Server
	var metricsAddr string
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			srv.Close()
			return err
		}
		admin = newServer(cfg, g.OpsHandler(), log)
		go func() { errc <- admin.Serve(mln) }()
		metricsAddr = mln.Addr().String()
		log.Info("metrics listening", "addr", metricsAddr)
	}
	if sweeper.Needed(g.Store()) {
		// Expired records are deleted while the gateway runs: a run every few minutes (with
		// jitter) that goes on while there is a backlog, paced to leave the store to requests
		// (at most a tenth of the time in it), reported in the idem_sweep_* metrics.
		sw, err := sweeper.Start(g.Store(), sweeper.Options{Interval: 5 * time.Minute, Logger: log,
			OnEvent: g.Metrics().ObserveSweep})
		if err != nil {
			srv.Close()
			if admin != nil {
				admin.Close()
			}
			return err
		}
		defer sw.Stop()
	}
	log.Info("idem gateway listening", "addr", ln.Addr().String(), "upstream", cfg.Upstream, "store", redact(cfg.Store))
	if cfg.WriteTimeout < cfg.UpstreamTimeout+cfg.Wait {
		log.Warn("write-timeout is shorter than upstream-timeout + wait: a slow call's client is cut off before its answer (which is still stored, for its retry)",
			"write_timeout", time.Duration(cfg.WriteTimeout), "upstream_timeout", time.Duration(cfg.UpstreamTimeout), "wait", time.Duration(cfg.Wait))
	}
	if cfg.ShutdownTimeout < cfg.UpstreamTimeout {
		log.Warn("shutdown-timeout is shorter than upstream-timeout: at shutdown, an upstream call that outlives the drain is answered 503 and its key follows --uncertain (hold: held until `idem release`; expire: kept until the call's deadline + lease; release: kept until the call's deadline, then free)",
			"shutdown_timeout", time.Duration(cfg.ShutdownTimeout), "upstream_timeout", time.Duration(cfg.UpstreamTimeout), "uncertain", cfg.Uncertain)
	}
	if ready != nil {
		ready(serveAddrs{addr: ln.Addr().String(), metricsAddr: metricsAddr})
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// /readyz answers 503 from now on (on the metrics listener, which stays open through the
	// drain), so a load balancer stops sending new requests while these finish. Every claim
	// whose upstream call is out is kept from lapsing while the call may run (Gateway.Drain),
	// so the process may end at any point from here without an effect running twice.
	g.Drain()
	// A second signal at any point from here ends the upstream calls still out (their requests
	// get 503 and their claims follow --uncertain), waits a moment for those answers, and exits 1.
	interrupted := func() error {
		log.Warn("second signal: ending the upstream calls still out; their keys follow --uncertain", "uncertain", cfg.Uncertain)
		actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		g.Abort(actx)
		_ = srv.Shutdown(actx) // the answers just written reach their clients
		cancel()
		srv.Close()
		if admin != nil {
			admin.Close()
		}
		return errors.New("interrupted by a second signal")
	}
	if delay := time.Duration(cfg.ShutdownDelay); delay > 0 {
		log.Info("shutting down: /readyz answers 503; still serving during the shutdown delay", "delay", delay)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-second:
			t.Stop()
			return interrupted()
		}
	}
	log.Info("shutting down: draining in-flight requests; /readyz answers 503", "timeout", time.Duration(cfg.ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.ShutdownTimeout))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(sctx) }()
	select {
	case err = <-done:
	case <-second:
		return interrupted()
	}
	if err != nil {
		// The upstream calls still out are ended: their requests get 503, their claims follow
		// --uncertain from the floor the drain gave them.
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n := g.Abort(actx)
		_ = srv.Shutdown(actx) // the answers just written reach their clients
		cancel()
		srv.Close()
		log.Warn("drain did not finish in time: the requests still in flight were answered 503 and their keys follow --uncertain",
			"requests", n, "uncertain", cfg.Uncertain, "err", err)
	}
	if admin != nil {
		actx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = admin.Shutdown(actx)
		cancel()
	}
	if err == nil {
		log.Info("stopped")
	}
	return nil
}

// newServer returns an http.Server for h with the configured timeouts. Headers must arrive
// within 10s (or ReadTimeout if shorter), so a client that trickles them is cut off early.
func newServer(cfg gateway.Config, h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(10*time.Second, time.Duration(cfg.ReadTimeout)),
		ReadTimeout:       time.Duration(cfg.ReadTimeout),
		WriteTimeout:      time.Duration(cfg.WriteTimeout),
		IdleTimeout:       time.Duration(cfg.IdleTimeout),
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
