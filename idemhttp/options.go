package idemhttp

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// ReplayedHeader is set to "true" on every replayed response (IETF draft, Stripe).
const ReplayedHeader = "Idempotent-Replayed"

// ExpiresHeader, sent when Options.ExpiresHeader is set, says until when the stored result of
// this key is replayed, as an HTTP-date (RFC 9110 §5.6.7): a retry with the same key up to then
// gets the same response and never a second execution; after it, the key is new again. No
// standard header exists for this yet. On the first response it is sent when the response is
// kept for replay; it is then an estimate a little before the stored expiry, never after.
const ExpiresHeader = "Idempotency-Expires"

// Default limits.
const (
	// DefaultMaxRequestBody is the default Options.MaxRequestBody: 1 MiB.
	DefaultMaxRequestBody = 1 << 20
	// DefaultMaxResponseBody is the default Options.MaxResponseBody: 1 MiB.
	DefaultMaxResponseBody = 1 << 20
)

// Options configure the middleware. Runner and Scope are required; the zero value of every
// other field is a safe default.
type Options struct {
	// Runner runs handlers at most once per key and stores their responses: an *idem.Engine,
	// or a transactional runner (pgstore.TxRunner, mysqlstore.TxRunner, sqlitestore.TxRunner)
	// that runs each handler in the same database transaction as the claim and the stored
	// response, and hands the handler that transaction in the request's context. Its options
	// (Runner.Options) decide the lease, how long responses are kept (TTL), whether duplicates
	// in flight wait (Wait) or get 409 at once, which statuses are kept (Policy:
	// idem.DefaultPolicy releases 5xx, 401, 403, 408, 409, 425 and 429; idem.StoreServerErrors
	// keeps 5xx too), what happens to an uncertain outcome (Uncertain), and a local cache of
	// hot replays (CacheSize); the middleware reads Policy, TTL and Now from them. Required.
	// A Runner sets Result.Executed when the handler's response
	// stands; when it returns an error with Executed false after the handler ran (a failed
	// commit), the handler's response is not sent unless it already began to stream: the
	// client gets the problem for that error (503 for idem.ErrStoreUnavailable, never a fail
	// open), and its retry executes or replays.
	Runner idem.Runner
	// Methods are processed; requests with other methods pass through untouched. Default
	// POST and PATCH.
	Methods []string
	// RequireKey answers 400 (ProblemMissingKey) to a processed request without a key.
	// Default false: such a request passes through untouched, without protection.
	RequireKey bool
	// Key says where the key comes from. Default: the Idempotency-Key header (ParseKey).
	Key KeySource
	// Scope gives the tenant a request acts for; it prefixes the storage key (StorageKey), so
	// tenants never see or block each other. Required: New refuses to guess, since without a
	// scope one caller who sends another's key and body receives the other's stored response.
	// Use a ScopeFunc that returns the caller's stable identity (the account your
	// authentication resolved, or KeyedHeaderScope over an API key), or SingleCaller when one
	// trusted caller is the only one to use the API.
	Scope ScopeFunc
	// Fingerprint identifies the request behind a key. Default RawFingerprint (method, path,
	// query and body bytes); JSONFingerprint canonicalises JSON bodies.
	Fingerprint FingerprintFunc
	// Route names the route of a request, stored with the record its key claims for
	// operators (idem.Record.Route: `idem list`, the operator console), cut to
	// idem.MaxRouteLen bytes. It takes no part in what is a duplicate. Default DefaultRoute:
	// the pattern the http.ServeMux matched, when the middleware wraps the handler the mux
	// routes to, or else the method and the path, which may carry identifiers (an order id, an
	// e-mail address) into the store: return a fixed label to keep them out, or use NoRoute to
	// store none.
	Route RouteFunc
	// MaxRequestBody is the largest request body read, in bytes; a larger one is answered 413
	// (ProblemRequestTooLarge) without running the handler. The body is read as it arrives,
	// into a buffer that grows with the bytes received: a declared Content-Length is checked
	// against the limit but never reserves memory. It applies to the requests the middleware
	// reads: processed methods with a key, or, with a KeySource that reads the body (JSONKey,
	// FuncKey), all requests of processed methods. Requests of other methods and, with a
	// header key, requests without one pass through untouched: their bodies stream to the
	// handler unread and unbounded by the middleware (http.MaxBytesHandler bounds them).
	// Default DefaultMaxRequestBody (1 MiB).
	MaxRequestBody int64
	// MaxResponseBody is the largest response body kept for replay, in bytes. A larger one is
	// streamed to the client as the handler writes it, and the record is completed without
	// the body: a retry gets ProblemNotRetained, never a second execution and never a
	// truncated body. Default DefaultMaxResponseBody (1 MiB).
	MaxResponseBody int64
	// MemoryBudget bounds the bytes of request and response buffers the middleware holds at
	// once, across all the requests in flight: request bodies as they arrive, responses
	// captured for replay, and the copies DetachBody makes. A request that would take the total
	// over the budget while the middleware reads its body is answered 503 (ProblemOverloaded)
	// with Retry-After, before any claim is taken: the handler does not run, and a retry with
	// the same key is safe. A response that would take it over is sent as the handler writes
	// it and not retained, as one over MaxResponseBody is. A request that would be the only one
	// holding memory is never refused, so a budget below one request's needs serves such
	// requests one at a time. Memory is counted as it is used, never from a declared
	// Content-Length; buffers that grew past 64 KiB are given back to the garbage collector
	// after their request, not pooled. Default DefaultMemoryBudget (64 MiB), or
	// 4 × (MaxRequestBody + MaxResponseBody) when that is larger; negative: unlimited.
	MemoryBudget int64
	// Budget, if set, is a memory budget shared with other middlewares (NewBudget), used
	// instead of one of MemoryBudget bytes for this middleware alone: middlewares in front of
	// several routes of one server are then bounded together. MemoryBudget must then be 0.
	// Default nil.
	Budget *Budget
	// DenyHeaders are response headers that are not stored, and so not replayed, besides the
	// hop-by-hop ones (Connection and those it names, Keep-Alive, Proxy-*, TE, Trailer,
	// Transfer-Encoding, Upgrade). Default: Set-Cookie. A non-nil empty slice denies none.
	DenyHeaders []string
	// ExpiresHeader adds the ExpiresHeader (Idempotency-Expires) to responses that are kept
	// and to replays. Default false.
	ExpiresHeader bool
	// FailOpen lets requests through to the handler, without protection, when the store fails
	// before the handler ran; each such request is logged at Warn and reported as
	// OutcomeFailOpen. Default false: fail closed with 503 (ProblemStoreUnavailable) and
	// Retry-After, and the handler does not run.
	FailOpen bool
	// StoreRetryAfter is the Retry-After sent with a 503 when the store fails, rounded up to
	// whole seconds. Default 1s.
	StoreRetryAfter time.Duration
	// DetachBody hands the handler a request body of its own, one that stays valid after the
	// handler returns. Set it when the handler passes r.Body to an http.Transport, as a reverse
	// proxy does (the idem gateway sets it): a Transport may go on reading a request's body
	// after RoundTrip has returned, when the upstream answers before it has read all of it, and
	// the middleware otherwise reuses the body's buffer for another request once the handler
	// returns. Default false: the body is read from a pooled buffer, which net/http's rule for
	// handlers (no reading r.Body once ServeHTTP has returned) makes safe. It costs a copy of
	// the body per request.
	DetachBody bool
	// OnEvent, if set, is called once per request, after the response is written, with what
	// happened (see Event). It runs on the request's goroutine: keep it fast.
	OnEvent func(Event)

	// RetainRequest keeps what the client sent with the record its key claims, for operators
	// who must answer "what did the client send?" (`idem inspect`, the operator console): the
	// method, the path and query, the headers and the body, kept when the key is claimed, so a
	// claim still in flight or held shows it too. The values of credentials are replaced by
	// RedactedValue before anything is kept: headers and query parameters that
	// CredentialHeader matches (Authorization, Cookie, X-API-Key, ...) and those named in
	// RedactHeaders. What is kept is at most MaxRetainedRequest bytes as the store keeps it:
	// the headers in order of name while they fit, then the first bytes of the body (the
	// record says how large the body was). Default false: a record keeps no request, and takes
	// no more room than one written before requests were kept.
	RetainRequest bool
	// MaxRetainedRequest bounds a retained request (RetainRequest) in bytes, as stored: a
	// client cannot make the store hold more, whatever the size of its headers or body. At
	// least 64. Default DefaultMaxRetainedRequest (4 KiB).
	MaxRetainedRequest int64
	// RedactHeaders are more headers whose values a retained request never keeps, besides those
	// CredentialHeader matches: the header your Scope reads, say, when its name does not say it
	// is a credential. Default none.
	RedactHeaders []string

	// FormatProblem, if set, writes the middleware's refusals (400, 409, 413, 422, 500, 503
	// and the replay of a response that was not retained) in the API's own error shape
	// instead of application/problem+json. Default nil: RFC 9457 problem+json.
	FormatProblem ProblemFormatter
	// Logger receives warnings: store failures, fail-open requests, results that could not be
	// stored, handler panics. Default slog.Default().
	Logger *slog.Logger
}

// optionError reports an invalid option as an *idem.OptionError raised by idemhttp.
func optionError(field, format string, args ...any) error {
	return &idem.OptionError{Package: "idemhttp", Field: field, Problem: fmt.Sprintf(format, args...)}
}

func (o Options) withDefaults() (Options, error) {
	switch {
	case o.Runner == nil || o.Runner == (*idem.Engine)(nil):
		return o, optionError("Options.Runner", "is required")
	case o.Scope == nil:
		return o, optionError("Options.Scope", "is required: a ScopeFunc that tells callers apart "+
			"(KeyedHeaderScope over an API key, or the account your authentication resolved), "+
			"or SingleCaller() when one trusted caller is the only one to use the API")
	}
	if len(o.Methods) == 0 {
		o.Methods = []string{http.MethodPost, http.MethodPatch}
	} else {
		ms := make([]string, len(o.Methods))
		for i, m := range o.Methods {
			ms[i] = strings.ToUpper(m)
			if !validToken(ms[i]) {
				return o, optionError("Options.Methods", "%q is not a method", m)
			}
		}
		o.Methods = ms
	}
	if err := o.Key.validate(); err != nil {
		return o, err
	}
	if o.Fingerprint == nil {
		o.Fingerprint = RawFingerprint
	}
	if o.Route == nil {
		o.Route = DefaultRoute
	}
	o.MaxRequestBody = cmp.Or(o.MaxRequestBody, DefaultMaxRequestBody)
	o.MaxResponseBody = cmp.Or(o.MaxResponseBody, DefaultMaxResponseBody)
	o.StoreRetryAfter = cmp.Or(o.StoreRetryAfter, time.Second)
	if o.Budget != nil && o.MemoryBudget != 0 {
		return o, optionError("Options.MemoryBudget", "and Options.Budget are both set")
	}
	if o.MemoryBudget == 0 && o.Budget == nil {
		o.MemoryBudget = DefaultMemoryBudget
		if o.MaxRequestBody < 1<<58 && o.MaxResponseBody < 1<<58 {
			o.MemoryBudget = max(o.MemoryBudget, 4*(o.MaxRequestBody+o.MaxResponseBody))
		} else {
			o.MemoryBudget = -1 // no budget could serve one request at such limits
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch {
	case o.MaxRequestBody < 0:
		return o, optionError("Options.MaxRequestBody", "%d is negative", o.MaxRequestBody)
	case o.MaxResponseBody < 0:
		return o, optionError("Options.MaxResponseBody", "%d is negative", o.MaxResponseBody)
	case o.StoreRetryAfter < 0:
		return o, optionError("Options.StoreRetryAfter", "%s is negative", o.StoreRetryAfter)
	case o.MaxRetainedRequest < 0:
		return o, optionError("Options.MaxRetainedRequest", "%d is negative", o.MaxRetainedRequest)
	case o.MaxRetainedRequest != 0 && o.MaxRetainedRequest < minRetainedRequest:
		return o, optionError("Options.MaxRetainedRequest", "%d is below %d bytes, too small for a method and a path", o.MaxRetainedRequest, minRetainedRequest)
	case o.MaxRetainedRequest > 1<<30:
		return o, optionError("Options.MaxRetainedRequest", "%d is above 1 GiB", o.MaxRetainedRequest)
	}
	o.MaxRetainedRequest = cmp.Or(o.MaxRetainedRequest, DefaultMaxRetainedRequest)
	for _, h := range o.RedactHeaders {
		if !validToken(h) {
			return o, optionError("Options.RedactHeaders", "%q is not a header name", h)
		}
	}
	if o.DenyHeaders == nil {
		o.DenyHeaders = []string{"Set-Cookie"}
	}
	for _, h := range o.DenyHeaders {
		if !validToken(h) {
			return o, optionError("Options.DenyHeaders", "%q is not a header name", h)
		}
	}
	return o, nil
}
