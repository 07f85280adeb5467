package idemlambda

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// ProxyOptions configure WrapAPIGateway and WrapHTTPAPI. Only Runner is required.
type ProxyOptions struct {
	// Runner runs the handler at most once per (scope, key) and stores its response: an
	// *idem.Engine, or a transactional runner (pgstore.TxRunner, …), whose claims are then not
	// bounded by the invocation's deadline (LeaseMargin does not apply). Its TTL is
	// how long responses are replayed, its Policy which responses are kept (by default 5xx,
	// 401, 403, 408, 409, 425 and 429 release the key), its Wait whether a duplicate waits for
	// the first request's response instead of getting 409. Required, unless DisabledEnv is set.
	Runner idem.Runner
	// Methods are the HTTP methods processed, in upper case as API Gateway sends them;
	// requests with other methods go to the handler untouched. Default POST and PATCH.
	Methods []string
	// RequireKey answers a processed request without an Idempotency-Key header with 400
	// (idemhttp.ProblemMissingKey). Default false: such a request goes to the handler
	// unprotected.
	RequireKey bool
	// ScopeHeader names a request header (matched case-insensitively, such as x-api-key) whose
	// value, hashed with SHA-256, is the caller's scope. Default "": the scope is the principal
	// the API Gateway authorizer established (see the package documentation).
	ScopeHeader string
	// Unscoped lets requests with no scope (no ScopeHeader value, no authorizer principal)
	// share one anonymous key space. Only for an API whose one caller is trusted. Default
	// false: such a request gets 400 (idemhttp.ProblemInvalidScope), so two tenants can never
	// meet on a key.
	Unscoped bool
	// LeaseMargin bounds each claim's lease by the invocation's deadline, as Options.LeaseMargin
	// does. Default DefaultLeaseMargin; negative leaves the engine's lease as it is.
	LeaseMargin time.Duration
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called once per invocation, as the wrapped handler returns, with
	// what happened to the request (for metrics and logs). Spans come from the runner's
	// idem.Options.Observer. Default nil.
	OnEvent func(Event)
}

// proxy is the part of WrapAPIGateway and WrapHTTPAPI that does not depend on the event's type.
type proxy struct {
	opt     ProxyOptions
	lease   *leaser // nil when disabled (DisabledEnv)
	methods map[string]bool
}

func newProxy(opt ProxyOptions) (*proxy, error) {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	off, err := disabled(opt.Logger)
	switch {
	case err != nil:
		return nil, err
	case (opt.Runner == nil || opt.Runner == (*idem.Engine)(nil)) && !off:
		return nil, optionError("ProxyOptions.Runner", "is required")
	}
	if opt.Methods == nil {
		opt.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	p := &proxy{opt: opt, methods: map[string]bool{}}
	for _, m := range opt.Methods {
		if m == "" || strings.ToUpper(m) != m {
			return nil, optionError("ProxyOptions.Methods", "%q is not an upper-case method name", m)
		}
		p.methods[m] = true
	}
	if off {
		return p, nil
	}
	if p.lease, err = newLeaser(opt.Runner, opt.LeaseMargin); err != nil {
		return nil, err
	}
	return p, nil
}

// request is what the proxy needs of an event.
type request struct {
	method, path, query string
	route               string // the record's route: the API's route template, or method and path
	body                string
	base64              bool
	header              func(name string) []string // values of a header, any case
	principal           string                     // the authorizer's principal, "" if none
}

// answer is the proxy's decision for a request: pass it to the handler unprotected, refuse it
// with a problem, or run it under a claim.
type answer struct {
	pass        bool
	status      int
	problemType string
	title       string
	retryAfter  int64 // seconds, 0: none
	key         string
	fingerprint string
	route       string
	// ev is what became of the request, for ProxyOptions.OnEvent: its Outcome for a
	// refusal; from serve, its Outcome, Takeover and Err.
	ev Event
}

func (p *proxy) decide(r request) answer {
	if !p.methods[r.method] {
		return answer{pass: true}
	}
	keys := r.header(idem.KeyHeader)
	switch {
	case len(keys) == 0 && p.opt.RequireKey:
		return refuse(400, idemhttp.ProblemMissingKey, "This request requires an idempotency key")
	case len(keys) == 0:
		return answer{pass: true}
	case len(keys) > 1:
		return refuse(400, idemhttp.ProblemInvalidKey, "The idempotency key must be 1 to 255 printable ASCII characters, sent once")
	}
	key, err := idemhttp.ParseKey(keys[0])
	if err != nil {
		return refuse(400, idemhttp.ProblemInvalidKey, "The idempotency key must be 1 to 255 printable ASCII characters, sent once")
	}
	var scope string
	if p.opt.ScopeHeader != "" {
		if vs := r.header(p.opt.ScopeHeader); len(vs) > 0 {
			scope = idemhttp.HashScope(vs...)
		}
	} else if r.principal != "" {
		scope = idemhttp.HashScope(r.principal)
	}
	if scope == "" && !p.opt.Unscoped {
		return refuse(400, idemhttp.ProblemInvalidScope, "The caller could not be identified")
	}
	body := []byte(r.body)
	if r.base64 {
		if body, err = base64.StdEncoding.DecodeString(r.body); err != nil {
			return refuse(400, idemhttp.ProblemInvalidBody, "The request body could not be read")
		}
	}
	return answer{
		key:         idemhttp.StorageKey(scope, key),
		fingerprint: idem.Fingerprint([]byte(r.method), []byte(r.path), []byte(r.query), body),
		route:       r.route,
	}
}

func refuse(status int, typ, title string) answer {
	return answer{status: status, problemType: typ, title: title, ev: Event{Outcome: problemOutcome(typ)}}
}

// observe returns the func that reports an invocation begun now to ProxyOptions.OnEvent:
// call it with the Event (Status, Start and Duration are filled in). It is nil without
// OnEvent; an Event without an Outcome (the handler panicked) is not reported.
func (p *proxy) observe() func(ev *Event, status int) {
	if p.opt.OnEvent == nil {
		return nil
	}
	start := time.Now()
	return func(ev *Event, status int) {
		if ev.Outcome == "" {
			return
		}
		ev.Status, ev.Start, ev.Duration = status, start, time.Since(start)
		p.opt.OnEvent(*ev)
	}
}

// problemBody is the application/problem+json body of a refusal, as idemhttp writes it.
func (a answer) problemBody() string {
	return `{"type":"` + a.problemType + `","title":"` + a.title + `","status":` + strconv.Itoa(a.status) + "}\n"
}

func (a answer) problemHeaders() map[string]string {
	h := map[string]string{"Content-Type": idemhttp.ProblemContentType, "X-Content-Type-Options": "nosniff"}
	if a.retryAfter > 0 {
		h["Retry-After"] = strconv.FormatInt(a.retryAfter, 10)
	}
	return h
}

// serve runs h under a claim on a's key, or replays. It returns the handler's response, the
// stored one (replayed true), a refusal (a.status set), or the handler's error.
func serve[Resp any](ctx context.Context, p *proxy, a answer, status func(Resp) int, h func(ctx context.Context) (Resp, error)) (out Resp, replayed bool, refusal answer, err error) {
	bctx, b := p.lease.bind(ctx)
	ran := false
	var herr error
	res, err := p.lease.eng.Run(bctx, idem.Call{Key: a.key, Fingerprint: a.fingerprint, Route: a.route}, func(ctx context.Context) (idem.Response, error) {
		defer b.run()()
		ran = true
		out, herr = h(ctx)
		if herr != nil {
			return idem.Response{}, herr
		}
		raw, err := json.Marshal(out)
		if err != nil {
			herr = fmt.Errorf("idemlambda: encoding the response: %w", err)
			return idem.Response{}, herr
		}
		return idem.Response{Status: status(out), Body: raw}, nil
	})
	if ran {
		refusal.ev = Event{Outcome: ranOutcome(herr, res.Kept), Takeover: res.Takeover, Err: herr}
		if herr != nil {
			var zero Resp
			return zero, false, refusal, b.joinRelease(herr)
		}
		if err != nil {
			// The handler ran and answered; only recording its response failed. The answer is
			// the truth: send it.
			refusal.ev.Outcome, refusal.ev.Err = OutcomeExecuted, err
			p.opt.Logger.Warn("idemlambda: the handler ran but its response could not be stored", "key", a.key, "err", err)
		}
		return out, false, refusal, nil
	}
	var inflight *idem.InFlightError
	switch {
	case err == nil:
		if uerr := json.Unmarshal(res.Response.Body, &out); uerr != nil {
			err = fmt.Errorf("%w: %v", idem.ErrCorruptRecord, uerr)
			return out, false, answer{ev: Event{Outcome: OutcomeError, Err: err}}, err
		}
		return out, true, answer{ev: Event{Outcome: OutcomeReplay}}, nil
	case errors.As(err, &inflight):
		r := refuse(409, idemhttp.ProblemInFlight, "A request with this idempotency key is being processed; retry later")
		r.retryAfter = int64((inflight.RetryAfter + time.Second - 1) / time.Second)
		r.ev.Err = err
		return out, false, r, nil
	case errors.Is(err, idem.ErrMismatch):
		r := refuse(422, idemhttp.ProblemMismatch, "This idempotency key was used with a different request")
		r.ev.Err = err
		return out, false, r, nil
	case errors.Is(err, idem.ErrStoreUnavailable):
		p.opt.Logger.Warn("idemlambda: idempotency store unavailable; request refused", "key", a.key, "err", err)
		r := refuse(503, idemhttp.ProblemStoreUnavailable, "The request was not processed: the idempotency store is unavailable; retry later")
		r.retryAfter = 1
		r.ev.Err = err
		return out, false, r, nil
	}
	return out, false, answer{ev: Event{Outcome: OutcomeError, Err: err}}, err
}

// WrapAPIGateway returns handler, a function behind an API Gateway REST API (proxy integration,
// payload format 1.0), with Idempotency-Key semantics: a request retried with the same key runs
// the handler once, and every retry gets the first response, with Idempotent-Replayed: true.
// See the package documentation for keys, scopes, fingerprints and refusals. It fails with an
// *idem.OptionError (matching idem.ErrInvalidInput) naming the field if an option is invalid.
//
// An error from the handler is returned as it is and releases the key, so a retry runs the
// handler again; so does a response the engine's Policy releases (5xx by default).
func WrapAPIGateway(opt ProxyOptions, handler func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error)) (func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error), error) {
	if handler == nil {
		return nil, optionError("handler", "is nil")
	}
	p, err := newProxy(opt)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req events.APIGatewayProxyRequest) (resp events.APIGatewayProxyResponse, err error) {
		var ev Event
		if done := p.observe(); done != nil {
			defer func() { done(&ev, resp.StatusCode) }()
		}
		a := p.decide(request{
			method: req.HTTPMethod, path: req.Path, query: v1Query(req), body: req.Body, base64: req.IsBase64Encoded,
			route:     proxyRoute(req.HTTPMethod, req.Resource, req.Path),
			header:    func(name string) []string { return v1Header(req, name) },
			principal: v1Principal(req.RequestContext),
		})
		switch {
		case a.pass || a.status == 0 && p.lease == nil: // not processed, or disabled
			resp, err = handler(ctx, req)
			ev.Outcome = OutcomeBypass
			return resp, err
		case a.status != 0:
			ev = a.ev
			return events.APIGatewayProxyResponse{StatusCode: a.status, Headers: a.problemHeaders(), Body: a.problemBody()}, nil
		}
		out, replayed, r, err := serve(ctx, p, a,
			func(r events.APIGatewayProxyResponse) int { return r.StatusCode },
			func(ctx context.Context) (events.APIGatewayProxyResponse, error) { return handler(ctx, req) })
		ev, ev.Key = r.ev, a.key
		switch {
		case err != nil:
			return out, err
		case r.status != 0:
			return events.APIGatewayProxyResponse{StatusCode: r.status, Headers: r.problemHeaders(), Body: r.problemBody()}, nil
		case replayed:
			out.Headers = withReplayed(out.Headers)
		}
		return out, nil
	}, nil
}

// WrapHTTPAPI is WrapAPIGateway for an API Gateway HTTP API (payload format 2.0), and for
// Lambda function URLs that use the same event shape.
func WrapHTTPAPI(opt ProxyOptions, handler func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)) (func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), error) {
	if handler == nil {
		return nil, optionError("handler", "is nil")
	}
	p, err := newProxy(opt)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, err error) {
		var ev Event
		if done := p.observe(); done != nil {
			defer func() { done(&ev, resp.StatusCode) }()
		}
		a := p.decide(request{
			method: req.RequestContext.HTTP.Method, path: req.RawPath, query: req.RawQueryString, body: req.Body, base64: req.IsBase64Encoded,
			route:     proxyRoute(req.RequestContext.HTTP.Method, req.RouteKey, req.RawPath),
			header:    func(name string) []string { return lookupHeader(req.Headers, nil, name) },
			principal: v2Principal(req.RequestContext.Authorizer),
		})
		switch {
		case a.pass || a.status == 0 && p.lease == nil: // not processed, or disabled
			resp, err = handler(ctx, req)
			ev.Outcome = OutcomeBypass
			return resp, err
		case a.status != 0:
			ev = a.ev
			return events.APIGatewayV2HTTPResponse{StatusCode: a.status, Headers: a.problemHeaders(), Body: a.problemBody()}, nil
		}
		out, replayed, r, err := serve(ctx, p, a,
			func(r events.APIGatewayV2HTTPResponse) int { return r.StatusCode },
			func(ctx context.Context) (events.APIGatewayV2HTTPResponse, error) { return handler(ctx, req) })
		ev, ev.Key = r.ev, a.key
		switch {
		case err != nil:
			return out, err
		case r.status != 0:
			return events.APIGatewayV2HTTPResponse{StatusCode: r.status, Headers: r.problemHeaders(), Body: r.problemBody()}, nil
		case replayed:
			out.Headers = withReplayed(out.Headers)
		}
		return out, nil
	}, nil
}

func withReplayed(h map[string]string) map[string]string {
	if h == nil {
		h = map[string]string{}
	}
	h[idemhttp.ReplayedHeader] = "true"
	return h
}

// lookupHeader returns the values of the header name, in any case, from a REST API's
// multi-value headers if it has them, else from its single-value ones (or an HTTP API's, whose
// names are lower case and whose repeated headers are joined by commas).
func lookupHeader(single map[string]string, multi map[string][]string, name string) []string {
	var out []string
	for k, vs := range multi {
		if strings.EqualFold(k, name) {
			out = append(out, vs...)
		}
	}
	if len(out) > 0 {
		return out
	}
	for k, v := range single {
		if strings.EqualFold(k, name) {
			out = append(out, v)
		}
	}
	return out
}

func v1Header(req events.APIGatewayProxyRequest, name string) []string {
	return lookupHeader(req.Headers, req.MultiValueHeaders, name)
}

// v1Query is the REST API request's query string, its parameters sorted by name: the event
// carries them parsed, not as sent.
func v1Query(req events.APIGatewayProxyRequest) string {
	q := url.Values(req.MultiValueQueryStringParameters)
	if len(q) == 0 && len(req.QueryStringParameters) > 0 {
		q = url.Values{}
		for k, v := range req.QueryStringParameters {
			q.Set(k, v)
		}
	}
	return q.Encode()
}

// v1Principal is who a REST API's authorizer says the caller is: a Lambda authorizer's
// principalId, a Cognito user pool's issuer and subject, the IAM caller, or the API key.
// Each kind is named, so a value of one kind never equals one of another.
func v1Principal(rc events.APIGatewayProxyRequestContext) string {
	if v, ok := rc.Authorizer["principalId"].(string); ok && v != "" {
		return "lambda\n" + v
	}
	if c, ok := rc.Authorizer["claims"].(map[string]any); ok {
		if sub, _ := c["sub"].(string); sub != "" {
			iss, _ := c["iss"].(string)
			return "jwt\n" + iss + "\n" + sub
		}
	}
	id := rc.Identity
	switch {
	case id.CognitoIdentityID != "":
		return "cognito-identity\n" + id.CognitoIdentityPoolID + "\n" + id.CognitoIdentityID
	case id.UserArn != "":
		return "iam\n" + id.UserArn
	case id.APIKeyID != "":
		return "api-key\n" + id.APIKeyID
	}
	return ""
}

// v2Principal is who an HTTP API's authorizer says the caller is: the JWT's issuer and subject,
// the IAM caller, or a Lambda authorizer's principalId.
func v2Principal(a *events.APIGatewayV2HTTPRequestContextAuthorizerDescription) string {
	if a == nil {
		return ""
	}
	if a.JWT != nil && a.JWT.Claims["sub"] != "" {
		return "jwt\n" + a.JWT.Claims["iss"] + "\n" + a.JWT.Claims["sub"]
	}
	if a.IAM != nil {
		switch {
		case a.IAM.CognitoIdentity.IdentityID != "":
			return "cognito-identity\n" + a.IAM.CognitoIdentity.IdentityPoolID + "\n" + a.IAM.CognitoIdentity.IdentityID
		case a.IAM.UserARN != "":
			return "iam\n" + a.IAM.UserARN
		}
	}
	if v, ok := a.Lambda["principalId"].(string); ok && v != "" {
		return "lambda\n" + v
	}
	return ""
}

// proxyRoute is the route a proxy's record carries, as idemhttp.DefaultRoute names it: the
// route template API Gateway matched (a REST API's resource, "/orders/{id}", or an HTTP API's
// route key, "POST /orders/{id}") with the method in front when it has none, or the method and
// the path when there is no template (a $default route, a function URL).
func proxyRoute(method, template, path string) string {
	switch {
	case template == "" || template == "$default":
		return method + " " + path
	case strings.IndexByte(template, ' ') >= 0:
		return template
	}
	return method + " " + template
}
