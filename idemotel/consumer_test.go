package idemotel_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/store/memstore"
)

func newTracedConsumer(t *testing.T, b *bundle, h consumer.Handler) *consumer.Consumer {
	t.Helper()
	e := b.engine(t, memstore.New(), idem.Options{})
	c, err := consumer.New(consumer.Options{
		Runner: e,
		Scope:  "billing-secret",
		Key:    func(m *consumer.Message) (string, error) { return "tenant-secret|" + string(m.Body[:3]), nil },
		Trace:  idemotel.ConsumerTrace(b.opt),
		Logger: quiet,
	}, h)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConsumerTrace: the consumer's span continues the trace in the message's headers
// whatever their case, carries the outcome and the key without scopes, and never the body, the
// other headers or the handler's error; a message without trace context starts a trace.
func TestConsumerTrace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.opt.Key = idemotel.ConsumerKey("billing-secret")
	c := newTracedConsumer(t, b, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		if strings.HasSuffix(string(m.Body), "fail") {
			return nil, errors.New("error-secret")
		}
		if strings.HasSuffix(string(m.Body), "reject") {
			return nil, consumer.Reject(errors.New("error-secret"))
		}
		return nil, nil
	})
	forbidden := []string{"billing-secret", "tenant-secret", "body-secret", "error-secret", "header-secret"}

	// A producer's context, carried in headers named in any case.
	_, producer := b.opt.TracerProvider.Tracer("producer").Start(context.Background(), "publish")
	headers := idemotel.TraceHeaders(trace.ContextWithSpan(context.Background(), producer), b.opt)
	producer.End()
	if headers["traceparent"] == "" {
		t.Fatalf("TraceHeaders: %v", headers)
	}
	b.ended(t)
	for _, name := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		m := &consumer.Message{Body: []byte(name[:3] + "body-secret"), Subject: "orders", ID: "m-" + name,
			Header: map[string][]string{name: {headers["traceparent"]}, "authorization": {"header-secret"}}}
		if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeExecuted {
			t.Fatalf("%s: %+v", name, r)
		}
		spans := b.ended(t, forbidden...)
		cons := one(t, spans, "idem.consume")
		if cons.Parent().SpanID() != producer.SpanContext().SpanID() || cons.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("%s: idem.consume's parent %v, kind %v", name, cons.Parent().SpanID(), cons.SpanKind())
		}
		if attr(cons, idemotel.AttrOutcome) != "executed" || attr(cons, idemotel.AttrKey) != name[:3] ||
			attr(cons, idemotel.AttrMessagingDestination) != "orders" || attr(cons, idemotel.AttrMessagingMessageID) != "m-"+name {
			t.Errorf("%s: idem.consume's attributes %v", name, cons.Attributes())
		}
		if claim := one(t, spans, "idem.claim"); claim.Parent().SpanID() != cons.SpanContext().SpanID() {
			t.Errorf("%s: idem.claim is not a child of idem.consume", name)
		}
	}

	// OutcomeFailed and rejected: an error status naming the outcome, not the error.
	for _, outcome := range []string{"fail", "reject"} {
		r := c.Handle(context.Background(), &consumer.Message{Body: []byte("f-" + outcome)})
		cons := one(t, b.ended(t, forbidden...), "idem.consume")
		if cons.Status().Code != codes.Error || cons.Status().Description != r.Outcome.String() ||
			attr(cons, idemotel.AttrOutcome) != r.Outcome.String() {
			t.Errorf("%s: %v, status %v", outcome, cons.Attributes(), cons.Status())
		}
		if cons.Parent().IsValid() {
			t.Errorf("%s: a message without trace context has a parent", outcome)
		}
	}

	// No span in the context: no headers.
	if h := idemotel.TraceHeaders(context.Background(), b.opt); len(h) != 0 {
		t.Errorf("TraceHeaders without a span: %v", h)
	}
}

// TestConsumerTraceNoop: with a no-op provider the consumer still runs, the message's trace
// context still reaches the handler, and nothing is left to end.
func TestConsumerTraceNoop(t *testing.T) {
	t.Parallel()
	opt := idemotel.Options{TracerProvider: tracenoop.NewTracerProvider(), Propagator: propagation.TraceContext{}}
	trace0 := idemotel.ConsumerTrace(opt)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx, done := trace0(context.Background(), &consumer.Message{Header: map[string][]string{"traceparent": {tp}}})
	if done != nil {
		t.Error("a no-op span has a func to end it")
	}
	if got := trace.SpanContextFromContext(ctx).TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id in the handler's context %q", got)
	}
}

func TestConsumerKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ scope, key, want string }{
		{"billing", "billing|order-1", "order-1"},
		{"billing", "billing|tenant|order-1", "order-1"}, // a tenant's scope in the key is dropped too
		{"billing/eu", "billing/eu|order/1", "order/1"},
		{"billing", "billing/eu|order/1", "order/1"}, // another scope is dropped all the same
		{"billing", "shipping|order-1", "order-1"},
		{"", "|order/1", "order/1"},
		{"", "|tenant|order/1", "order/1"},
		{"", "tenant|order/1", "order/1"},
		{"", "order/1", "order/1"}, // a key without a scope
	} {
		if got := idemotel.ConsumerKey(tc.scope)(tc.key); got != tc.want {
			t.Errorf("ConsumerKey(%q)(%q) = %q, want %q", tc.scope, tc.key, got, tc.want)
		}
	}
}
