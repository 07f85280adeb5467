package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/idemkit/idem"
)

// Config is the gateway's configuration: what `idem serve` reads from flags, IDEM_* environment
// variables and a YAML file (in that order of precedence). The zero value plus an Upstream and
// a scope decision (ScopeHeader with a ScopeSecret, or Scope "none") is a working gateway.
type Config struct {
	// Listen is the address the proxy serves on. Default 127.0.0.1:8080.
	Listen string `yaml:"listen"`
	// Upstream is the URL of the API behind the gateway. Required.
	Upstream string `yaml:"upstream"`
	// Store is the store URL. Default sqlite://./idem.db.
	Store string `yaml:"store"`
	// ScopeHeader names the header whose value scopes keys per tenant, e.g. X-API-Key: two
	// callers that send the same key never see or block each other's records. Its value is
	// hashed with HMAC-SHA256 under ScopeSecret, so the scope in stored keys and logs cannot be
	// turned back into the credential offline. It must carry a stable identity: a rotating
	// bearer token is NOT a stable scope (a refreshed token makes a retry look like another
	// tenant's first request). A request that sends it twice is refused (400), and so is one
	// that sends it spelled with underscores (X_API_KEY for X-API-Key, which servers that follow
	// CGI's naming read as the same header: 400, problem type scope-header-spelling); a name
	// with an underscore is refused at startup. Either
	// ScopeHeader or Scope "none" is required: without a scope, one caller's key returns
	// another's stored response.
	ScopeHeader string `yaml:"scope_header"`
	// Scope "none" declares that no scope is wanted: keys are global, for a gateway that one
	// trusted caller uses. It excludes ScopeHeader.
	Scope string `yaml:"scope"`
	// ScopeSecret is the key of the scope header's HMAC, at least MinScopeSecret bytes,
	// required with a ScopeHeader. Every gateway of one store must share it; keep it out of the
	// store (whoever holds both could test guesses of a credential against stored keys).
	// Changing it changes every scope: records made under the old secret are no longer found,
	// so a retry after the change of a request made before it executes again. Rotate it when no
	// retry of an earlier request can come any more (after the TTL, or with clients drained).
	ScopeSecret string `yaml:"scope_secret"`
	// ScopeSecretFile names a file holding ScopeSecret (a trailing newline is ignored), so the
	// secret need not appear in a command line or the config. It excludes ScopeSecret.
	ScopeSecretFile string `yaml:"scope_secret_file"`
	// TTL is how long completed responses are kept and replayed. Default 24h.
	TTL Duration `yaml:"ttl"`
	// Lease is how long a claim holds before another gateway may take over a request whose
	// holder died. Default 30s.
	Lease Duration `yaml:"lease"`
	// RequireKey answers 400 to a processed request without a key. Default false: such
	// requests pass through.
	RequireKey bool `yaml:"require_key"`
	// Methods are processed; others pass through. Default POST and PATCH.
	Methods []string `yaml:"methods"`
	// MaxBody is the largest request body accepted (413 above) and the largest response body
	// kept for replay (larger ones are streamed and not retained). Default 1 MiB.
	MaxBody ByteSize `yaml:"max_body"`
	// MemoryBudget bounds the bytes of request and response bodies held at once across all
	// requests in flight (idemhttp.Options.MemoryBudget): a request that would go over it is
	// answered 503 with Retry-After before anything runs; a response that would is streamed
	// and not retained. Default 64 MiB or 4 × (2 × MaxBody) if larger; -1: unlimited.
	MemoryBudget ByteSize `yaml:"memory_budget"`
	// RetainRequest keeps what each client sent with the record its key claims, so that an
	// operator can answer "what did the client send?" with `idem inspect` and the console,
	// also while the claim is in flight or held: the method, path and query, headers and the
	// first bytes of the body. Credentials never reach the store: the values of Authorization,
	// Cookie, the scope headers and every header or query parameter whose name marks a
	// credential (idemhttp.CredentialHeader) are replaced by [redacted]. Default false: records
	// keep no request (privacy), and take no more room than without it.
	RetainRequest bool `yaml:"retain_request"`
	// RetainRequestMax bounds each retained request, in bytes as stored (headers first, then
	// as much of the body as fits): whatever a client sends, the store holds no more. At least
	// 64 bytes. Default 4KiB.
	RetainRequestMax ByteSize `yaml:"retain_request_max"`
	// Wait makes a duplicate wait up to this long for an in-flight original and replay it,
	// instead of answering 409. Default 0 (409 at once).
	Wait Duration `yaml:"wait"`
	// MetricsListen serves /metrics (Prometheus) on its own address. Default: no metrics.
	MetricsListen string `yaml:"metrics_listen"`
	// ConsoleListen serves the operator's web console on its own address, such as
	// 127.0.0.1:8081 (`idem serve`; it needs a credential). Default: no console.
	ConsoleListen string `yaml:"console_listen"`
	// ConsoleTokenFile is the file holding the console's token, at least 16 bytes (`idem
	// serve`). Default: the token from IDEM_CONSOLE_TOKEN.
	ConsoleTokenFile string `yaml:"console_token_file"`
	// OTLPEndpoint sends OpenTelemetry traces and metrics over OTLP/HTTP to this collector
	// URL, such as http://collector:4318 (/v1/traces and /v1/metrics are added; a URL ending in
	// one of them names that signal's URL, the other's beside it). Traces: a span per request
	// that continues the caller's traceparent, with the engine's spans (idem.claim,
	// idem.effect, ...) under it. Metrics: the engine's (idem.outcomes, idem.store.duration,
	// idem.claims.in_flight, ...), exported every OTEL_METRIC_EXPORT_INTERVAL (default 60s)
	// and on shutdown; /metrics (Prometheus) is served as before. Default: none, unless the
	// standard OTEL_EXPORTER_OTLP_ENDPOINT is set (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, for that signal alone); OTEL_TRACES_EXPORTER=none or
	// OTEL_METRICS_EXPORTER=none turns a signal off; the other OTEL_EXPORTER_OTLP_* and OTEL_*
	// variables (headers, OTEL_SERVICE_NAME, ...) apply either way.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// ErrorBody, if set, writes the gateway's refusals in the API's own error shape instead
	// of application/problem+json (see ErrorBody). YAML only. Default: problem+json.
	ErrorBody *ErrorBody `yaml:"error_body"`
	// LogFormat is text or json. Default text.
	LogFormat string `yaml:"log_format"`
	// LogLevel is debug, info, warn or error. Default info: one line per processed request;
	// warn keeps only problems (store errors, upstream failures, lost leases).
	LogLevel string `yaml:"log_level"`
	// Uncertain says what happens when the upstream got the request but gave no answer
	// (reset, timeout): expire (default: keep the claim until its lease runs out), release
	// (retry at once: only for upstreams that are idempotent themselves) or hold (keep it until
	// an operator runs `idem release`).
	Uncertain string `yaml:"uncertain"`
	// Store5xx keeps and replays upstream 5xx answers (Stripe's choice). Default false: a 5xx
	// releases the key so a retry executes.
	Store5xx bool `yaml:"store_5xx"`
	// H2C makes the gateway accept HTTP/2 without TLS (prior knowledge, as load balancers and
	// sidecars speak it to backends) besides HTTP/1.1. One connection then carries many
	// requests at once, so thousands of requests in flight need not hold a socket each.
	// Default false. The upstream is still called over HTTP/1.1 (or HTTP/2 for https).
	H2C bool `yaml:"h2c"`
	// Cache is how many completed responses each gateway keeps in memory (at most 64 MiB) to
	// serve hot replays without a store round trip. Default 10000; -1 disables it. Safe with
	// several gateways on one store: a completed response does not change until it expires.
	Cache int `yaml:"cache"`
	// UpstreamTimeout bounds one upstream call. Default 60s.
	UpstreamTimeout Duration `yaml:"upstream_timeout"`
	// ShutdownTimeout bounds the drain of in-flight requests on SIGINT/SIGTERM. Default
	// UpstreamTimeout + 5s, so that every upstream call may end within it. A call still out at
	// its end is answered 503 (ProblemShuttingDown) and its claim follows Uncertain, never left
	// to lapse while the upstream may still act on it (see Gateway.Drain).
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
	// ShutdownDelay is how long, after the first SIGINT/SIGTERM, the gateway keeps serving new
	// requests with /readyz already answering 503, before the drain begins: the time a load
	// balancer (a Kubernetes Service's endpoints) takes to stop sending it traffic. Default 0;
	// `idem serve` makes it 5s when it runs in Kubernetes (KUBERNETES_SERVICE_HOST is set).
	ShutdownDelay Duration `yaml:"shutdown_delay"`
	// WaitForStore is how long New keeps trying to reach a store that does not answer at
	// startup, logging each failed attempt, before it fails. Default 0: New fails at once,
	// naming the store. Every store is reached the same way: opened, then read once.
	WaitForStore Duration `yaml:"wait_for_store"`
	// ReadTimeout bounds the reading of a whole request, headers and body, on the gateway's
	// and the metrics listener: a client that sends part of a body and stalls is cut off, and a
	// processed request whose body did not arrive is answered 400 without calling the upstream.
	// Default 60s. Headers alone must arrive within 10s (or ReadTimeout if shorter).
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout bounds the time from the end of a request's headers to the end of its
	// answer on both listeners: a client that does not read its answer is cut off. It does not
	// cut the upstream call, which is detached: a response that comes after it is still stored
	// and replayed to the client's retry. Default UpstreamTimeout + Wait + 30s, so that a
	// slow but answered call still reaches its client.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout closes a keep-alive connection that carries no request for this long.
	// Default 90s: longer than the 60s idle timeout of common load balancers, so that the
	// balancer, not the gateway, closes the connections it keeps, and never reuses one the
	// gateway is closing.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// Routes refine the defaults per method and path; the first match wins.
	Routes []Route `yaml:"routes"`
}

// Route is a per-route rule.
type Route struct {
	// Method matches the request method; empty or "*" matches any.
	Method string `yaml:"method"`
	// Path matches the request path: exact, or a prefix when it ends in "/*", or with
	// single-segment wildcards "{name}" (e.g. /v1/orders/{id}/pay).
	Path string `yaml:"path"`
	// Mode is required (400 without a key), optional (pass through without one) or off (never
	// processed). Default: the gateway's RequireKey.
	Mode string `yaml:"mode"`
	// TTL overrides the gateway's TTL for this route.
	TTL Duration `yaml:"ttl"`
	// KeyHeader takes the key from another header (e.g. X-GitHub-Delivery for webhooks).
	KeyHeader string `yaml:"key_header"`
	// KeyJSONField takes the key from a top-level field of the JSON body (e.g. id, for a
	// Stripe event), or a dotted path into nested objects (data.object.id).
	KeyJSONField string `yaml:"key_json_field"`
	// Fingerprint is raw (the body bytes, default) or json (canonical JSON, key order and
	// whitespace ignored).
	Fingerprint string `yaml:"fingerprint"`
	// IgnoreFields are JSON fields left out of a json fingerprint (dotted paths), for bodies
	// that carry a timestamp that changes between retries.
	IgnoreFields []string `yaml:"ignore_fields"`
	// ScopeHeader overrides the gateway's ScopeHeader for this route.
	ScopeHeader string `yaml:"scope_header"`
}

// ScopeNone is the value of Config.Scope that declares keys global (one trusted caller).
const ScopeNone = "none"

// MinScopeSecret is the shortest Config.ScopeSecret accepted, in bytes.
const MinScopeSecret = 16

// Duration is a time.Duration that reads from YAML as "30s", "24h".
type Duration time.Duration

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (like 30s or 24h)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// ByteSize is a size that reads as 1048576, "1MiB", "512KiB" or "1MB".
type ByteSize int64

// UnmarshalYAML reads a size, or -1 (unlimited, where a field allows it).
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if strings.TrimSpace(n.Value) == "-1" {
		*b = -1
		return nil
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = ByteSize(v)
	return nil
}

// ParseByteSize parses 1048576, 1MiB, 512KiB, 1MB, 10kB (KiB/MiB/GiB are powers of 1024,
// kB/MB/GB of 1000).
func ParseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"kB", 1000}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("%q is not a size (like 1048576 or 1MiB)", s)
	}
	return n * mult, nil
}

// LoadFile reads a YAML config file, expanding ${VAR} and $VAR from the environment first.
// Unknown keys are an error, so a typo is not silently ignored.
func LoadFile(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	return Parse(b)
}

// Parse reads a YAML config, expanding environment variables first. A config that does not
// parse is reported as an *idem.OptionError (matching idem.ErrInvalidInput).
func Parse(b []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(os.ExpandEnv(string(b))))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, configError("config", "does not parse: %v", err)
	}
	return c, nil
}

// WithDefaults returns c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.Store == "" {
		c.Store = "sqlite://./idem.db"
	}
	if c.TTL == 0 {
		c.TTL = Duration(24 * time.Hour)
	}
	if c.Lease == 0 {
		c.Lease = Duration(30 * time.Second)
	}
	if len(c.Methods) == 0 {
		c.Methods = []string{"POST", "PATCH"}
	}
	for i, m := range c.Methods {
		c.Methods[i] = strings.ToUpper(strings.TrimSpace(m))
	}
	if len(c.Routes) > 0 {
		routes := make([]Route, len(c.Routes))
		for i, r := range c.Routes {
			r.Method = strings.ToUpper(strings.TrimSpace(r.Method))
			routes[i] = r
		}
		c.Routes = routes
	}
	if c.MaxBody == 0 {
		c.MaxBody = 1 << 20
	}
	if c.LogFormat == "" {
		c.LogFormat = "text"
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.Uncertain == "" {
		c.Uncertain = "expire"
	}
	if c.Cache == 0 {
		c.Cache = 10000
	}
	if c.UpstreamTimeout == 0 {
		c.UpstreamTimeout = Duration(60 * time.Second)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = c.UpstreamTimeout + Duration(5*time.Second)
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = Duration(60 * time.Second)
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = c.UpstreamTimeout + c.Wait + Duration(30*time.Second)
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = Duration(90 * time.Second)
	}
	return c
}

// configError reports an invalid configuration key as an *idem.OptionError raised by the
// gateway; field is the YAML key.
func configError(field, format string, args ...any) error {
	return &idem.OptionError{Package: "gateway", Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Validate reports the first problem in c (with defaults applied) as an *idem.OptionError
// (matching idem.ErrInvalidInput) whose Field is the YAML key at fault.
func (c Config) Validate() error {
	if c.ErrorBody != nil {
		if _, err := c.ErrorBody.formatter(); err != nil {
			return err
		}
	}
	if c.OTLPEndpoint != "" {
		if _, err := otlpURL(c.OTLPEndpoint, "traces"); err != nil {
			return err
		}
	}
	u, err := url.Parse(c.Upstream)
	switch {
	case c.Upstream == "":
		return configError("upstream", "is required (the URL of the API behind the gateway)")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return configError("upstream", "%q is not an http:// or https:// URL", c.Upstream)
	case time.Duration(c.Lease) < time.Second:
		return configError("lease", "%s is below 1s", time.Duration(c.Lease))
	case c.TTL < c.Lease:
		return configError("ttl", "%s is shorter than lease %s", time.Duration(c.TTL), time.Duration(c.Lease))
	case c.Wait < 0:
		return configError("wait", "%s is negative", time.Duration(c.Wait))
	case c.WaitForStore < 0:
		return configError("wait_for_store", "%s is negative", time.Duration(c.WaitForStore))
	case c.ShutdownDelay < 0:
		return configError("shutdown_delay", "%s is negative", time.Duration(c.ShutdownDelay))
	case c.ReadTimeout < 0 || c.WriteTimeout < 0 || c.IdleTimeout < 0 || c.UpstreamTimeout < 0 || c.ShutdownTimeout < 0:
		return configError("read_timeout", "or another timeout is negative (read_timeout %s, write_timeout %s, idle_timeout %s, upstream_timeout %s, shutdown_timeout %s)",
			time.Duration(c.ReadTimeout), time.Duration(c.WriteTimeout), time.Duration(c.IdleTimeout), time.Duration(c.UpstreamTimeout), time.Duration(c.ShutdownTimeout))
	case c.Cache < -1:
		return configError("cache", "%d is below -1", c.Cache)
	case c.MemoryBudget < -1:
		return configError("memory_budget", "%d is below -1", c.MemoryBudget)
	case c.MaxBody < 1:
		return configError("max_body", "%d is below 1 byte", c.MaxBody)
	case c.RetainRequestMax != 0 && !c.RetainRequest:
		return configError("retain_request_max", "is set without retain_request: no request is kept")
	case c.RetainRequestMax != 0 && c.RetainRequestMax < 64:
		return configError("retain_request_max", "%d is below 64 bytes, too small for a method and a path", c.RetainRequestMax)
	case c.RetainRequestMax > 1<<30:
		return configError("retain_request_max", "%d is above 1GiB", c.RetainRequestMax)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return configError("log_format", "%q is neither text nor json", c.LogFormat)
	case c.LogLevel != "debug" && c.LogLevel != "info" && c.LogLevel != "warn" && c.LogLevel != "error":
		return configError("log_level", "%q is not debug, info, warn or error", c.LogLevel)
	}
	if err := c.uncertainPolicy(); err != nil {
		return configError("uncertain", "%v", err)
	}
	switch {
	case c.Scope != "" && c.Scope != ScopeNone:
		return configError("scope", "%q: the only value is none (to scope by a header, set scope_header)", c.Scope)
	case c.Scope == ScopeNone && c.ScopeHeader != "":
		return configError("scope", "none and scope_header exclude each other")
	case c.Scope == "" && c.ScopeHeader == "":
		return configError("scope", "is not set: set scope_header (the header naming the caller, e.g. X-API-Key, with a scope_secret) "+
			"so that one caller's key never returns another caller's stored response, or scope: none (--scope none) if one trusted caller uses this gateway")
	case c.ScopeSecret != "" && c.ScopeSecretFile != "":
		return configError("scope_secret", "and scope_secret_file exclude each other")
	case c.ScopeSecret != "" && len(c.ScopeSecret) < MinScopeSecret:
		return configError("scope_secret", "has %d bytes, fewer than %d", len(c.ScopeSecret), MinScopeSecret)
	}
	if err := checkScopeHeader("scope_header", c.ScopeHeader); err != nil {
		return err
	}
	needSecret := c.ScopeHeader != ""
	for i, r := range c.Routes {
		needSecret = needSecret || r.ScopeHeader != ""
		if err := checkScopeHeader(fmt.Sprintf("routes[%d] (%s %s): scope_header", i, r.Method, r.Path), r.ScopeHeader); err != nil {
			return err
		}
	}
	if needSecret && c.ScopeSecret == "" && c.ScopeSecretFile == "" {
		return configError("scope_secret", "is required with a scope header (or scope_secret_file): the key of the HMAC that hides the header's value "+
			"(at least 16 random bytes, shared by the gateways of one store, e.g. from openssl rand -hex 32)")
	}
	for _, m := range c.Methods {
		if m == "" || strings.ContainsAny(m, " \t/") {
			return configError("methods", "%q is not a method", m)
		}
	}
	for i, r := range c.Routes {
		if err := r.validate(); err != nil {
			return configError(fmt.Sprintf("routes[%d] (%s %s)", i, r.Method, r.Path), "%v", err)
		}
	}
	return nil
}

func (r Route) validate() error {
	switch {
	case r.Path == "" || r.Path[0] != '/':
		return fmt.Errorf("path %q must start with /", r.Path)
	case r.Mode != "" && r.Mode != "required" && r.Mode != "optional" && r.Mode != "off":
		return fmt.Errorf("mode %q is not required, optional or off", r.Mode)
	case r.Fingerprint != "" && r.Fingerprint != "raw" && r.Fingerprint != "json":
		return fmt.Errorf("fingerprint %q is not raw or json", r.Fingerprint)
	case len(r.IgnoreFields) > 0 && r.Fingerprint != "json":
		return errors.New("ignore_fields needs fingerprint: json")
	case r.KeyHeader != "" && r.KeyJSONField != "":
		return errors.New("key_header and key_json_field are exclusive")
	case r.TTL < 0:
		return fmt.Errorf("ttl %s is negative", time.Duration(r.TTL))
	}
	return nil
}

// uncertainPolicy parses Uncertain with the engine's own words; the error is nil when it is
// one of them.
func (c Config) uncertainPolicy() error {
	var p idem.UncertainPolicy
	return p.UnmarshalText([]byte(c.Uncertain))
}

// UncertainPolicy returns the engine's policy that Uncertain names (expire, release or hold).
func (c Config) UncertainPolicy() idem.UncertainPolicy {
	var p idem.UncertainPolicy
	_ = p.UnmarshalText([]byte(c.Uncertain)) // Validate has rejected anything else
	return p
}
