package gateway

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/store/memstore"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpCollector is an OTLP/HTTP trace receiver: it decodes each POST /v1/traces and keeps the
// spans' names by trace id.
type otlpCollector struct {
	mu    sync.Mutex
	spans map[string][]string // hex trace id → span names
	paths []string
}

func (c *otlpCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, err := io.ReadAll(body)
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &req)
	}
	if err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.paths = append(c.paths, r.URL.Path)
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				id := hex.EncodeToString(s.GetTraceId())
				c.spans[id] = append(c.spans[id], s.GetName())
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(out))
}

// TestOTLPTraces: with an OTLP endpoint the gateway continues the caller's traceparent and
// exports the engine's spans under it, all sent by the time Close returns.
func TestOTLPTraces(t *testing.T) {
	col := &otlpCollector{spans: map[string][]string{}}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	// The standard variable points elsewhere: the configured endpoint takes precedence.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_METRICS_EXPORTER", "none") // traces only here; TestOTLPMetrics has metrics
	g, err := New(context.Background(), Config{Upstream: up.URL, Scope: ScopeNone, OTLPEndpoint: srv.URL},
		Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":1}`))
	r.Header.Set("Idempotency-Key", "k1")
	r.Header.Set("Traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		t.Fatalf("status %d", w.Code)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}

	col.mu.Lock()
	defer col.mu.Unlock()
	for _, p := range col.paths {
		if p != "/v1/traces" {
			t.Errorf("spans posted to %s, want /v1/traces", p)
		}
	}
	got := map[string]bool{}
	for _, n := range col.spans[traceID] {
		got[n] = true
	}
	for _, want := range []string{"POST", "idem.claim", "idem.effect", "idem.complete"} {
		if !got[want] {
			t.Errorf("no %s span in trace %s; spans by trace: %v", want, traceID, col.spans)
		}
	}
	if len(col.spans) != 1 {
		t.Errorf("spans in %d traces, want all in the caller's: %v", len(col.spans), col.spans)
	}
}

// TestOTLPEndpointInvalid: an endpoint that is not an http(s) URL is a configuration error.
func TestOTLPEndpointInvalid(t *testing.T) {
	for _, ep := range []string{"collector:4318", "grpc://collector:4317", "http://"} {
		err := Config{Upstream: "http://127.0.0.1:1", Scope: ScopeNone, OTLPEndpoint: ep}.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), "otlp_endpoint") {
			t.Errorf("%q: %v, want an otlp_endpoint error", ep, err)
		}
	}
}
