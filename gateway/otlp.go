package gateway

import (
	"context"
	"fmt"
	"net/url"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingEnabled reports whether the gateway exports traces: Config.OTLPEndpoint is set, or
// the standard OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is.
func (c Config) tracingEnabled() bool {
	return c.OTLPEndpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// otlpTracesURL turns Config.OTLPEndpoint into the URL spans are posted to: a URL without a
// path gets the standard /v1/traces, as OTEL_EXPORTER_OTLP_ENDPOINT does.
func otlpTracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("config: otlp_endpoint %q is not an http:// or https:// URL", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// newTracerProvider sets up the OTLP/HTTP exporter and a batching tracer provider. The
// exporter and the SDK also read the standard OTEL_* variables (headers, compression,
// timeout, sampler, batching, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES); an endpoint from
// the configuration takes precedence over one from the environment.
func newTracerProvider(ctx context.Context, cfg Config) (*sdktrace.TracerProvider, error) {
	var opts []otlptracehttp.Option
	if cfg.OTLPEndpoint != "" {
		u, err := otlpTracesURL(cfg.OTLPEndpoint)
		if err != nil {
			return nil, err
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("gateway: otlp exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "idem")), // OTEL_SERVICE_NAME overrides
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("gateway: otlp resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// tracePropagator reads and writes W3C traceparent, tracestate and baggage.
var tracePropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
