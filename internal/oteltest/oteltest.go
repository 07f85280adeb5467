// Package oteltest checks, in the broker adapters' tests, that a consumer continues the trace
// of the producer that sent a message: an OpenTelemetry SDK recording spans in memory, a
// producer span whose trace context goes into the message's headers, and the check of the
// spans the consumer made for it.
package oteltest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/store/memstore"
)

// Scope is the consumer scope of Consumer: it must never show on a span.
const Scope = "scope-secret"

// Credential is a header value a producer may send (an authorization header): it must never
// show on a span.
const Credential = "credential-secret"

// Tracing is one test's SDK and the instrumentation options that use it.
type Tracing struct {
	spans *tracetest.SpanRecorder
	// Opt is idemotel's options for the consumer side: the SDK's tracer, W3C trace context,
	// and ConsumerKey(Scope).
	Opt idemotel.Options
}

// New returns a Tracing whose provider is shut down when the test ends.
func New(t testing.TB) *Tracing {
	tr := &Tracing{spans: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tr.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr.Opt = idemotel.Options{TracerProvider: tp, Propagator: propagation.TraceContext{}, Store: "memory", Key: idemotel.ConsumerKey(Scope)}
	return tr
}

// Consumer returns a consumer, traced with ConsumerTrace, whose engine is traced by
// idemotel's observer, with Scope, a key taken from the body ("order:<id>:..."), and a handler
// that makes a span "charge" under its context.
func (tr *Tracing) Consumer(t testing.TB) *consumer.Consumer {
	t.Helper()
	obs, err := idemotel.Observer(tr.Opt)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	eng, err := idem.New(memstore.New(), idem.Options{Observer: obs, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	tracer := tr.Opt.TracerProvider.Tracer("charge")
	c, err := consumer.New(consumer.Options{
		Runner: eng,
		Scope:  Scope,
		Key:    func(m *consumer.Message) (string, error) { return strings.SplitN(string(m.Body), ":", 3)[1], nil },
		Trace:  idemotel.ConsumerTrace(tr.Opt),
		Logger: quiet,
	}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		_, span := tracer.Start(ctx, "charge")
		span.End()
		return []byte("receipt"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Produce starts and ends a producer span, as a publisher would around its publish, and
// returns it with the headers to put on the message: the trace context, made by a
// propagator of the producer's own, and an authorization header carrying Credential.
func (tr *Tracing) Produce() (trace.SpanContext, map[string]string) {
	ctx, span := tr.Opt.TracerProvider.Tracer("producer").Start(context.Background(), "publish",
		trace.WithSpanKind(trace.SpanKindProducer))
	h := idemotel.TraceHeaders(ctx, idemotel.Options{Propagator: propagation.TraceContext{}})
	span.End()
	h["authorization"] = "Bearer " + Credential
	return span.SpanContext(), h
}

// Check waits for the consumer's span in the producer's trace and checks that it continues
// that trace: idem.consume a child of the producer's span, the engine's claim a child of
// idem.consume, and for the first delivery of the event (duplicate false) the effect under
// idem.consume, its completion and the handler's span under the effect; for a duplicate, an
// idem.replay and no effect. No span carries secret (a part of the body), the Scope or the
// Credential.
func (tr *Tracing) Check(t testing.TB, secret string, producer trace.SpanContext, duplicate bool) {
	t.Helper()
	var spans []sdktrace.ReadOnlySpan
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans = spans[:0]
		for _, s := range tr.spans.Ended() {
			if s.SpanContext().TraceID() == producer.TraceID() {
				spans = append(spans, s)
			}
		}
		if cons := one(spans, "idem.consume"); cons != nil && attr(cons, idemotel.AttrOutcome) != "in_flight" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no idem.consume span in the producer's trace after 10s; its spans: %v", names(spans))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, s := range tr.spans.Ended() {
		forbid(t, s, secret, Scope, Credential)
	}
	cons := one(spans, "idem.consume")
	if cons.Parent().SpanID() != producer.SpanID() || !cons.Parent().IsRemote() {
		t.Errorf("idem.consume's parent is %v, want the producer's span %v", cons.Parent().SpanID(), producer.SpanID())
	}
	if cons.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("idem.consume is a %v span", cons.SpanKind())
	}
	if got := attr(cons, idemotel.AttrKey); got != "order-1" {
		t.Errorf("idem.consume's idem.key %q, want order-1", got)
	}
	claimName, outcome := "idem.claim", "executed"
	if duplicate {
		claimName, outcome = "idem.replay", "replay"
	}
	if got := attr(cons, idemotel.AttrOutcome); got != outcome {
		t.Errorf("idem.consume's outcome %q, want %q", got, outcome)
	}
	claim := one(spans, claimName)
	if claim == nil || claim.Parent().SpanID() != cons.SpanContext().SpanID() {
		t.Fatalf("no %s child of idem.consume in the producer's trace: %v", claimName, names(spans))
	}
	if got := attr(claim, idemotel.AttrKey); got != "order-1" {
		t.Errorf("%s's idem.key %q, want order-1", claimName, got)
	}
	if duplicate {
		if one(spans, "idem.effect") != nil || one(spans, "charge") != nil {
			t.Errorf("a duplicate ran the effect: %v", names(spans))
		}
		return
	}
	effect, complete, charge := one(spans, "idem.effect"), one(spans, "idem.complete"), one(spans, "charge")
	switch {
	case effect == nil || effect.Parent().SpanID() != cons.SpanContext().SpanID():
		t.Errorf("no idem.effect child of idem.consume: %v", names(spans))
	case complete == nil || complete.Parent().SpanID() != effect.SpanContext().SpanID():
		t.Errorf("no idem.complete child of idem.effect: %v", names(spans))
	case charge == nil || charge.Parent().SpanID() != effect.SpanContext().SpanID():
		t.Errorf("the handler's span is not a child of idem.effect: %v", names(spans))
	}
}

func one(spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// forbid fails if the span's name, attributes, events or status carry one of the strings.
func forbid(t testing.TB, s sdktrace.ReadOnlySpan, forbidden ...string) {
	t.Helper()
	text := []string{s.Name(), s.Status().Description}
	for _, kv := range s.Attributes() {
		text = append(text, string(kv.Key), kv.Value.String())
	}
	for _, ev := range s.Events() {
		text = append(text, ev.Name)
		for _, kv := range ev.Attributes {
			text = append(text, string(kv.Key), kv.Value.String())
		}
	}
	for _, f := range forbidden {
		for _, x := range text {
			if strings.Contains(x, f) {
				t.Errorf("span %s carries %q: %q", s.Name(), f, x)
			}
		}
	}
}
