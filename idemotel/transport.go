package idemotel

import (
	"context"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
)

// attempts counts the attempts made under one intent span.
type attemptsKey struct{}

// Intent wraps a retrying transport (an *idemclient.Transport) so that each logical request
// is one span, "idem.intent", whose children are its attempts when the retrying transport's
// Base is wrapped by Transport:
//
//	rt, _ := idemclient.New(idemclient.Options{Base: idemotel.Transport(http.DefaultTransport, o)})
//	client := &http.Client{Transport: idemotel.Intent(rt, o)}
//
// The intent span carries idem.key (the key sent on every attempt) and idem.attempt (how many
// attempts were made). It ends when the retrying transport returns, before the body is read.
func Intent(rt http.RoundTripper, opt Options) http.RoundTripper {
	return &intent{rt: rt, tracer: opt.tracer()}
}

type intent struct {
	rt     http.RoundTripper
	tracer trace.Tracer
}

func (t *intent) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, span := t.tracer.Start(req.Context(), "idem.intent", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", req.Method)))
	defer span.End()
	n := new(atomic.Int64)
	ctx = context.WithValue(ctx, attemptsKey{}, n)
	resp, err := t.rt.RoundTrip(req.WithContext(ctx))
	span.SetAttributes(AttrAttempt.Int64(n.Load()))
	key := req.Header.Get(idem.KeyHeader)
	if resp != nil {
		if resp.Request != nil {
			key = resp.Request.Header.Get(idem.KeyHeader)
		}
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
		if resp.StatusCode >= 500 {
			span.SetStatus(codes.Error, "")
		}
	}
	if key != "" {
		span.SetAttributes(AttrKey.String(key))
	}
	if err != nil {
		// Not the message: it may quote the URL.
		span.SetStatus(codes.Error, "request failed")
	}
	return resp, err
}

// Transport wraps rt so that each request it sends is a client span, "idem.attempt", whose
// trace context is injected into the request's headers (W3C traceparent with the usual
// propagator), so the server continues the trace. Used as an idemclient.Transport's Base,
// each attempt is one span, a child of the Intent span, with idem.attempt its number and
// idem.key the key. The span ends when rt returns, before the body is read. The caller's
// request is not modified.
func Transport(rt http.RoundTripper, opt Options) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return &transport{rt: rt, tracer: opt.tracer(), prop: opt.propagator()}
}

type transport struct {
	rt     http.RoundTripper
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	attrs := []attribute.KeyValue{attribute.String("http.request.method", req.Method)}
	if n, ok := req.Context().Value(attemptsKey{}).(*atomic.Int64); ok {
		attrs = append(attrs, AttrAttempt.Int64(n.Add(1)))
	}
	if key := req.Header.Get(idem.KeyHeader); key != "" {
		attrs = append(attrs, AttrKey.String(key))
	}
	ctx, span := t.tracer.Start(req.Context(), "idem.attempt", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrs...))
	defer span.End()
	r := req.Clone(ctx)
	t.prop.Inject(ctx, propagation.HeaderCarrier(r.Header))
	resp, err := t.rt.RoundTrip(r)
	if err != nil {
		span.SetStatus(codes.Error, "request failed")
		return resp, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, "")
	}
	return resp, err
}
