package idemotel

import (
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
)

// instrumentation is the instrumentation scope name of every tracer and meter this package
// makes.
const instrumentation = "github.com/idemkit/idem/idemotel"

// Options configure the instrumentation. The zero value uses OpenTelemetry's global providers
// and propagator.
type Options struct {
	// TracerProvider makes the tracer. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the meter. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator injects and extracts trace context in HTTP headers (Transport, Handler).
	// Default otel.GetTextMapPropagator(), which the application sets up (W3C traceparent
	// with propagation.TraceContext{}).
	Propagator propagation.TextMapPropagator
	// Store names the kind of store, put on spans and metrics as idem.store (for example
	// "postgres", "redis", "sqlite"). Default "": the attribute is left out.
	Store string
	// Key turns a storage key into the value of the idem.key attribute; "" leaves the
	// attribute out. Default ClientKey, which drops the tenant's scope.
	Key func(storageKey string) string
}

func (o Options) tracer() trace.Tracer {
	tp := o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(instrumentation)
}

func (o Options) meter() metric.Meter {
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter(instrumentation)
}

func (o Options) propagator() propagation.TextMapPropagator {
	if o.Propagator != nil {
		return o.Propagator
	}
	return otel.GetTextMapPropagator()
}

// ClientKey returns the client's part of a storage key: what follows the first
// idem.ScopeSeparator (see idem.ScopedKey), or the whole key when it has none (a key passed to
// Engine.Do as it is). The scope in front, which identifies a tenant, is never returned.
func ClientKey(storageKey string) string {
	if _, after, ok := strings.Cut(storageKey, string(idem.ScopeSeparator)); ok {
		return after
	}
	return storageKey
}
