package idemotel_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem/idemotel"
)

// A proxy traced end to end: Handler makes the server span, named after the route the
// router reports with Route, and ClientTransport the client span of the call upstream, whose
// context the upstream receives.
func ExampleClientTransport() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	o := idemotel.Options{TracerProvider: tp, Propagator: propagation.TraceContext{}}

	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("upstream has a traceparent:", r.Header.Get("Traceparent") != "")
		w.WriteHeader(http.StatusCreated)
	}))
	defer upstream.Close()
	client := &http.Client{Transport: idemotel.ClientTransport(http.DefaultTransport, o)}
	proxy := idemotel.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idemotel.Route(r.Context(), "/v1/charges")
		out, _ := http.NewRequestWithContext(r.Context(), r.Method, upstream.URL+r.URL.Path, nil)
		resp, err := client.Do(out)
		if err != nil {
			http.Error(w, "upstream failed", http.StatusBadGateway)
			return
		}
		resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
	}), o)

	proxy.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/charges", nil))
	for _, s := range spans.Ended() {
		fmt.Println(s.SpanKind(), s.Name())
	}
	// Output:
	// upstream has a traceparent: true
	// client POST
	// server POST /v1/charges
}
