package idemotel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/store/memstore"
)

// TestNoopTracer: over the no-op tracer provider the observer and Handler make no span but
// still measure, and the caller's trace context still reaches the effect.
func TestNoopTracer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.opt.TracerProvider = tracenoop.NewTracerProvider()
	e := b.engine(t, memstore.New(), idem.Options{})
	var seen trace.SpanContext
	h := idemotel.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.Do(r.Context(), "k", fp1, func(ctx context.Context) (idem.Response, error) {
			seen = trace.SpanContextFromContext(ctx)
			return idem.Response{Status: 201}, nil
		})
	}), idemotel.Options{TracerProvider: b.opt.TracerProvider, Propagator: propagation.TraceContext{}})
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if seen.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("the effect's trace context: %v", seen)
	}
	if got := b.sums(t)["idem.outcomes{idem.outcome=kept,idem.stage=effect,idem.store=memory}"]; got != 1 {
		t.Errorf("kept effects measured: %d, want 1 (%v)", got, b.sums(t))
	}
	if got := b.sums(t)["idem.claims.in_flight{idem.store=memory}"]; got != 0 {
		t.Errorf("in-flight claims after the effect: %d", got)
	}
	if spans := b.spans.Ended(); len(spans) != 0 {
		t.Errorf("%d spans recorded", len(spans))
	}
}
