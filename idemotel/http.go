package idemotel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// HTTP attribute keys from OpenTelemetry's HTTP semantic conventions, set on the spans and
// metrics of Handler and ClientTransport.
const (
	attrMethod     = attribute.Key("http.request.method")
	attrMethodOrig = attribute.Key("http.request.method_original")
	attrStatus     = attribute.Key("http.response.status_code")
	attrRoute      = attribute.Key("http.route")
	attrScheme     = attribute.Key("url.scheme")
	attrPath       = attribute.Key("url.path")
	attrFull       = attribute.Key("url.full")
	attrServerAddr = attribute.Key("server.address")
	attrServerPort = attribute.Key("server.port")
	attrUserAgent  = attribute.Key("user_agent.original")
	attrProto      = attribute.Key("network.protocol.version")
	attrErrorType  = attribute.Key("error.type")
)

// HTTPDurationBounds are the bucket bounds, in seconds, of the http.server.request.duration
// and http.client.request.duration histograms: those OpenTelemetry's HTTP semantic
// conventions advise, from 5 ms to 10 s.
var HTTPDurationBounds = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// StoreDurationBounds are the bucket bounds, in seconds, of the idem.store.duration
// histogram: from 100 µs (an in-memory or local Redis call) to 10 s (a claim that waited for
// its holder).
var StoreDurationBounds = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// knownMethods are the methods the HTTP semantic conventions name; any other is reported as
// _OTHER, with the method sent in http.request.method_original, so that a client cannot make
// one metric series per invented method.
var knownMethods = map[string]bool{
	http.MethodConnect: true, http.MethodDelete: true, http.MethodGet: true, http.MethodHead: true,
	http.MethodOptions: true, http.MethodPatch: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodTrace: true,
}

func methodAttrs(method string) []attribute.KeyValue {
	if knownMethods[method] {
		return []attribute.KeyValue{attrMethod.String(method)}
	}
	return []attribute.KeyValue{attrMethod.String("_OTHER"), attrMethodOrig.String(method)}
}

// spanMethod is the method as it appears in a span's name: _OTHER becomes HTTP.
func spanMethod(method string) string {
	if knownMethods[method] {
		return method
	}
	return "HTTP"
}

// routeKey is the context key of the *routeSlot a Handler puts in each request's context.
type routeKey struct{}

type routeSlot struct{ route atomic.Pointer[string] }

// Route records the route that matched the request whose context is ctx, as a template
// ("/v1/orders/{id}", never the path with its identifiers), for the server span and the
// duration metric that Handler makes: the span is then named "POST /v1/orders/{id}" and
// carries http.route. A router calls it once it has matched the request; outside a Handler
// it does nothing.
func Route(ctx context.Context, route string) {
	if s, ok := ctx.Value(routeKey{}).(*routeSlot); ok {
		s.route.Store(&route)
	}
}

func (s *routeSlot) get() string {
	if r := s.route.Load(); r != nil {
		return *r
	}
	return ""
}

// Handler continues, in h, the trace of the caller: it extracts the trace context from the
// request's headers (W3C traceparent with the usual propagator) and runs h under a server
// span that follows OpenTelemetry's HTTP semantic conventions: named after the method, or
// "POST /v1/orders/{id}" once Route has named the route; with http.request.method, url.path,
// url.scheme, server.address, server.port, user_agent.original, http.route and
// http.response.status_code; its status an error when the answer is a 5xx. With a meter
// provider it records the http.server.request.duration histogram in seconds (bounds
// HTTPDurationBounds), by method, status, route and scheme.
//
// Put it outside the idemhttp middleware, so that the engine's spans (idem.claim,
// idem.effect, …) and the handler's own are children of the caller's trace:
//
//	http.Handle("/charges", idemotel.Handler(mw(charges), o))
//
// An application that already uses otelhttp.NewHandler around the middleware gets the same
// continuation from it and needs no Handler.
func Handler(h http.Handler, opt Options) http.Handler {
	tracer, prop := opt.tracer(), opt.propagator()
	if _, ok := opt.TracerProvider.(tracenoop.TracerProvider); ok {
		tracer = nil
	}
	var duration metric.Float64Histogram
	if _, ok := opt.MeterProvider.(metricnoop.MeterProvider); !ok {
		d, err := opt.meter().Float64Histogram("http.server.request.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of HTTP server requests."),
			metric.WithExplicitBucketBoundaries(HTTPDurationBounds...))
		if err == nil {
			duration = d
		}
	}
	server := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		if tracer == nil && duration == nil {
			// Nothing to record: the caller's trace context is still passed on.
			if ctx != r.Context() {
				r = r.WithContext(ctx)
			}
			h.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		slot := &routeSlot{}
		ctx = context.WithValue(ctx, routeKey{}, slot)
		var span trace.Span
		if tracer != nil {
			ctx, span = tracer.Start(ctx, spanMethod(r.Method), server...)
			if span.IsRecording() {
				span.SetAttributes(serverAttrs(r)...)
			}
		}
		rec := &statusWriter{ResponseWriter: w}
		returned := false
		defer func() {
			status := rec.status
			switch {
			case !returned:
				// The handler panicked (the panic goes on, untouched, to http.Server).
				status = http.StatusInternalServerError
			case status == 0:
				status = http.StatusOK // a handler that wrote nothing answered 200
			}
			route := slot.get()
			if span != nil {
				if route != "" {
					span.SetName(spanMethod(r.Method) + " " + route)
					span.SetAttributes(attrRoute.String(route))
				}
				span.SetAttributes(attrStatus.Int(status))
				if status >= 500 {
					span.SetStatus(codes.Error, "")
					span.SetAttributes(attrErrorType.String(strconv.Itoa(status)))
				}
				span.End()
			}
			if duration != nil {
				attrs := append(methodAttrs(r.Method), attrStatus.Int(status), attrScheme.String(scheme(r)))
				if route != "" {
					attrs = append(attrs, attrRoute.String(route))
				}
				if status >= 500 {
					attrs = append(attrs, attrErrorType.String(strconv.Itoa(status)))
				}
				duration.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), metric.WithAttributes(attrs...))
			}
		}()
		h.ServeHTTP(rec, r.WithContext(ctx))
		returned = true
	})
}

// serverAttrs are a server span's attributes known when the request arrives.
func serverAttrs(r *http.Request) []attribute.KeyValue {
	attrs := append(methodAttrs(r.Method), attrPath.String(r.URL.Path), attrScheme.String(scheme(r)))
	if host, port := hostPort(r.Host); host != "" {
		attrs = append(attrs, attrServerAddr.String(host))
		if port > 0 {
			attrs = append(attrs, attrServerPort.Int(port))
		}
	}
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, attrUserAgent.String(ua))
	}
	return append(attrs, attrProto.String(fmt.Sprintf("%d.%d", r.ProtoMajor, r.ProtoMinor)))
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// hostPort splits a Host header or URL host; port is 0 when absent or not a number.
func hostPort(hp string) (string, int) {
	host, p, err := net.SplitHostPort(hp)
	if err != nil {
		return strings.Trim(hp, "[]"), 0
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return host, 0
	}
	return host, port
}

// statusWriter remembers the status of the answer. Unwrap lets http.ResponseController reach
// the writer's other abilities (flushing, deadlines); Flush and Hijack are passed on for code
// that asserts them directly.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// ClientTransport wraps rt so that each request it sends is a client span that follows
// OpenTelemetry's HTTP semantic conventions, named after the method, with
// http.request.method, server.address, server.port, url.full (without credentials or query)
// and http.response.status_code, its status an error on a 5xx or a failed call. The span's
// context is injected into the request's headers, replacing any trace context they carried,
// so that the server's spans are its children: a proxy that forwards a client's request
// through it makes the trace client → proxy → server one trace. With a meter provider it
// records the http.client.request.duration histogram in seconds (bounds HTTPDurationBounds).
// The span ends when rt returns, before the body is read. The caller's request is not
// modified.
//
// Transport is the retrying client's form, whose spans carry the attempt's number.
func ClientTransport(rt http.RoundTripper, opt Options) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	c := &clientTransport{rt: rt, tracer: opt.tracer(), prop: opt.propagator()}
	if _, ok := opt.MeterProvider.(metricnoop.MeterProvider); !ok {
		d, err := opt.meter().Float64Histogram("http.client.request.duration", metric.WithUnit("s"),
			metric.WithDescription("Duration of HTTP client requests."),
			metric.WithExplicitBucketBoundaries(HTTPDurationBounds...))
		if err == nil {
			c.duration = d
		}
	}
	return c
}

type clientTransport struct {
	rt       http.RoundTripper
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	duration metric.Float64Histogram
}

func (t *clientTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	host, port := hostPort(req.URL.Host)
	if port == 0 {
		port = 80
		if req.URL.Scheme == "https" {
			port = 443
		}
	}
	attrs := append(methodAttrs(req.Method), attrServerAddr.String(host), attrServerPort.Int(port))
	full := spanURL(req)
	ctx, span := t.tracer.Start(req.Context(), spanMethod(req.Method), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, attrFull.String(full))...))
	r := req.Clone(ctx)
	t.prop.Inject(ctx, propagation.HeaderCarrier(r.Header))
	resp, err := t.rt.RoundTrip(r)
	status := 0
	switch {
	case err != nil:
		kind := "request_failed"
		if errors.Is(err, context.DeadlineExceeded) {
			kind = "timeout"
		} else if errors.Is(err, context.Canceled) {
			kind = "canceled"
		}
		attrs = append(attrs, attrErrorType.String(kind))
		// Not the message: it may quote the URL.
		span.SetStatus(codes.Error, kind)
	default:
		status = resp.StatusCode
		attrs = append(attrs, attrStatus.Int(status))
		span.SetAttributes(attrStatus.Int(status))
		if status >= 500 {
			attrs = append(attrs, attrErrorType.String(strconv.Itoa(status)))
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
	if t.duration != nil {
		t.duration.Record(context.WithoutCancel(ctx), time.Since(start).Seconds(), metric.WithAttributes(attrs...))
	}
	return resp, err
}

// spanURL is the request's URL without user information, query or fragment, which may carry
// secrets.
func spanURL(r *http.Request) string {
	u := *r.URL
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}
