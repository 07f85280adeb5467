package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem/idemotel"
)

// tracingEnabled reports whether the gateway exports traces: Config.OTLPEndpoint is set, or
// the standard OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is, and
// OTEL_TRACES_EXPORTER is not "none".
func (c Config) tracingEnabled() bool {
	return os.Getenv("OTEL_TRACES_EXPORTER") != "none" && (c.OTLPEndpoint != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "")
}

// metricsEnabled reports whether the gateway exports metrics over OTLP: Config.OTLPEndpoint is
// set, or the standard OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is,
// and OTEL_METRICS_EXPORTER is not "none".
func (c Config) metricsEnabled() bool {
	return os.Getenv("OTEL_METRICS_EXPORTER") != "none" && (c.OTLPEndpoint != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "")
}

// otlpURL turns Config.OTLPEndpoint into the URL a signal ("traces", "metrics") is posted
// to. A URL whose path ends in /v1/traces or /v1/metrics names one signal's URL, and the other
// signal's is beside it; any other URL is the collector's base, to which /v1/traces and
// /v1/metrics are added, as for OTEL_EXPORTER_OTLP_ENDPOINT.
func otlpURL(endpoint, signal string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", configError("otlp_endpoint", "%q is not an http:// or https:// URL", endpoint)
	}
	base := strings.TrimSuffix(u.Path, "/")
	for _, s := range []string{"/v1/traces", "/v1/metrics"} {
		base = strings.TrimSuffix(base, s)
	}
	u.Path, u.RawPath = base+"/v1/"+signal, ""
	return u.String(), nil
}

// otlpResource describes the gateway to the collector: service.name "idem" unless
// OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
func otlpResource(ctx context.Context) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "idem")), // OTEL_SERVICE_NAME overrides
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("gateway: otlp resource: %w", err)
	}
	return res, nil
}

// newTracerProvider sets up the OTLP/HTTP trace exporter and a batching tracer provider. The
// exporter and the SDK also read the standard OTEL_* variables (headers, compression,
// timeout, sampler, batching); an endpoint from the configuration takes precedence over one
// from the environment.
func newTracerProvider(ctx context.Context, cfg Config, res *resource.Resource) (*sdktrace.TracerProvider, error) {
	var opts []otlptracehttp.Option
	if cfg.OTLPEndpoint != "" {
		u, err := otlpURL(cfg.OTLPEndpoint, "traces")
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("gateway: otlp trace exporter: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// newMeterProvider sets up the OTLP/HTTP metric exporter and a meter provider that exports
// every OTEL_METRIC_EXPORT_INTERVAL (default 60s) and once more when it shuts down. The
// exporter and the reader also read the standard OTEL_* variables (headers, compression,
// timeout, temporality); an endpoint from the configuration takes precedence over one from
// the environment.
func newMeterProvider(ctx context.Context, cfg Config, res *resource.Resource) (*sdkmetric.MeterProvider, error) {
	var opts []otlpmetrichttp.Option
	if cfg.OTLPEndpoint != "" {
		u, err := otlpURL(cfg.OTLPEndpoint, "metrics")
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlpmetrichttp.WithEndpointURL(u))
	}
	exp, err := otlpmetrichttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("gateway: otlp metric exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(res)), nil
}

// tracePropagator reads and writes W3C traceparent, tracestate and baggage.
var tracePropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// openTelemetry sets up OTLP export: traces (a server span per request continuing the caller's
// trace, the engine's spans under it) and the engine's metrics (idemotel's), each when
// enabled; what is disabled goes to a no-op provider.
func (g *Gateway) openTelemetry(ctx context.Context, cfg Config, opt Options, tracing, metering bool) error {
	res, err := otlpResource(ctx)
	if err != nil {
		return err
	}
	otelOpt := idemotel.Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider(),
		Propagator: tracePropagator}
	if tracing {
		if g.tracer, err = newTracerProvider(ctx, cfg, res); err != nil {
			return err
		}
		otelOpt.TracerProvider = g.tracer
	}
	if metering {
		if g.meter, err = newMeterProvider(ctx, cfg, res); err != nil {
			return err
		}
		otelOpt.MeterProvider = g.meter
	}
	if opt.Store == nil {
		otelOpt.Store, _, _ = strings.Cut(cfg.Store, "://")
	}
	if g.observer, err = idemotel.Observer(otelOpt); err != nil {
		return fmt.Errorf("gateway: opentelemetry: %w", err)
	}
	// The server span (and http.server.request.duration) around the whole request, and a
	// client span (and http.client.request.duration) around the upstream call, whose context
	// the upstream receives: client → gateway → upstream is one trace.
	g.traced = idemotel.Handler(http.HandlerFunc(g.serveHTTP), otelOpt)
	g.traceUpstream = func(rt http.RoundTripper) http.RoundTripper { return idemotel.ClientTransport(rt, otelOpt) }
	return nil
}
