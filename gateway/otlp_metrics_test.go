package gateway

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	collectormetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem/store/memstore"
)

// otlpReceiver is an OTLP/HTTP receiver of traces and metrics: it decodes each export and
// keeps, per metric name and attribute set, the latest cumulative value (a sum's value, a
// histogram's count), with the resource's service.name and the headers it came with.
type otlpReceiver struct {
	mu       sync.Mutex
	metrics  map[string]int64 // "name{k=v,...}" → value
	services map[string]bool
	auth     map[string]bool // Authorization headers seen
	exports  map[string]int  // path → exports received
}

func newOTLPReceiver() *otlpReceiver {
	return &otlpReceiver{metrics: map[string]int64{}, services: map[string]bool{}, auth: map[string]bool{}, exports: map[string]int{}}
}

func (c *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	if err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.exports[r.URL.Path]++
	c.auth[r.Header.Get("Authorization")] = true
	var resp proto.Message
	switch r.URL.Path {
	case "/v1/traces":
		var req collectortrace.ExportTraceServiceRequest
		if proto.Unmarshal(raw, &req) != nil {
			http.Error(w, "bad traces", http.StatusBadRequest)
			return
		}
		resp = &collectortrace.ExportTraceServiceResponse{}
	case "/v1/metrics":
		var req collectormetrics.ExportMetricsServiceRequest
		if proto.Unmarshal(raw, &req) != nil {
			http.Error(w, "bad metrics", http.StatusBadRequest)
			return
		}
		for _, rm := range req.GetResourceMetrics() {
			for _, a := range rm.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					c.services[a.GetValue().GetStringValue()] = true
				}
			}
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					for _, p := range m.GetSum().GetDataPoints() {
						c.metrics[m.GetName()+labels(p.GetAttributes())] = p.GetAsInt()
					}
					for _, p := range m.GetHistogram().GetDataPoints() {
						c.metrics[m.GetName()+labels(p.GetAttributes())] = int64(p.GetCount())
					}
				}
			}
		}
		resp = &collectormetrics.ExportMetricsServiceResponse{}
	default:
		http.NotFound(w, r)
		return
	}
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = io.Copy(w, bytes.NewReader(out))
}

// labels renders attributes as {k=v,...} in their order (the SDK sorts them by key).
func labels(attrs []*commonpb.KeyValue) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, a := range attrs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(a.GetKey() + "=" + a.GetValue().GetStringValue())
	}
	b.WriteByte('}')
	return b.String()
}

func (c *otlpReceiver) get(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.metrics[name]
}

// TestOTLPMetrics: with an OTLP endpoint the gateway exports the engine's metrics too, every
// OTEL_METRIC_EXPORT_INTERVAL while it runs and once more on Close, with the headers and the
// service name the standard variables give; /metrics (Prometheus) is still served.
func TestOTLPMetrics(t *testing.T) {
	col := newOTLPReceiver()
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://127.0.0.1:1/v1/metrics") // the configured endpoint wins
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20collector-token")
	t.Setenv("OTEL_SERVICE_NAME", "payments-gateway")
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "100") // milliseconds
	g, err := New(context.Background(), Config{Upstream: up.URL, Scope: ScopeNone, OTLPEndpoint: srv.URL},
		Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			g.Close()
		}
	})
	send := func(key string) int {
		r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w.Code
	}
	for _, key := range []string{"k1", "k1", "k2"} {
		if code := send(key); code != http.StatusCreated {
			t.Fatalf("%s: status %d", key, code)
		}
	}
	// Exported while the gateway runs, at the interval from the environment (60s by default).
	// The last effect may complete just after its response is sent.
	const newClaims = "idem.outcomes{idem.outcome=new,idem.stage=claim}"
	want := map[string]int64{
		newClaims: 2,
		"idem.outcomes{idem.outcome=replay,idem.stage=claim}":    1,
		"idem.outcomes{idem.outcome=kept,idem.stage=effect}":     2,
		"idem.outcomes{idem.outcome=ok,idem.stage=complete}":     2,
		"idem.store.duration{idem.outcome=new,idem.stage=claim}": 2,
		"idem.claims.in_flight{}":                                0,
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		col.mu.Lock()
		missing := []string{}
		for name, n := range want {
			if got, ok := col.metrics[name]; !ok || got != n {
				missing = append(missing, fmt.Sprintf("%s = %d (exported: %v), want %d", name, got, ok, n))
			}
		}
		col.mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not exported within 10s: %v", missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Prometheus is served as before.
	mfs, err := g.gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	replayed := -1.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "idem_requests_total" && len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "replay" {
				replayed = m.GetCounter().GetValue()
			}
		}
	}
	if replayed != 1 {
		t.Errorf("Prometheus idem_requests_total{outcome=\"replayed\"} = %v, want 1", replayed)
	}

	// What happens after the last periodic export is flushed by Close.
	if code := send("k3"); code != http.StatusCreated {
		t.Fatalf("k3: status %d", code)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if got := col.get(newClaims); got != 3 {
		t.Errorf("after Close, %s = %d, want 3", newClaims, got)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if !col.services["payments-gateway"] || len(col.services) != 1 {
		t.Errorf("service names %v, want payments-gateway from OTEL_SERVICE_NAME", col.services)
	}
	if !col.auth["Bearer collector-token"] || len(col.auth) != 1 {
		t.Errorf("Authorization headers %v, want the one from OTEL_EXPORTER_OTLP_HEADERS", col.auth)
	}
	if col.exports["/v1/traces"] == 0 || col.exports["/v1/metrics"] < 2 {
		t.Errorf("exports by path %v: want traces and several metric exports", col.exports)
	}
}

// TestOTLPMetricsFromEnvironment: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT alone exports metrics
// and no traces; OTEL_METRICS_EXPORTER=none turns metrics off.
func TestOTLPMetricsFromEnvironment(t *testing.T) {
	col := newOTLPReceiver()
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", srv.URL+"/v1/metrics")
	for _, off := range []bool{false, true} {
		if off {
			t.Setenv("OTEL_METRICS_EXPORTER", "none")
		}
		g, err := New(context.Background(), Config{Upstream: up.URL, Scope: ScopeNone},
			Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "k")
		g.ServeHTTP(httptest.NewRecorder(), r)
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if col.exports["/v1/metrics"] != 1 || col.exports["/v1/traces"] != 0 || len(col.exports) != 1 {
		t.Errorf("exports by path %v, want one of metrics only", col.exports)
	}
	if got := col.metrics["idem.outcomes{idem.outcome=new,idem.stage=claim}"]; got != 1 {
		t.Errorf("new claims exported: %d, want 1", got)
	}
}

// TestOTLPURL: the collector URL gives each signal's.
func TestOTLPURL(t *testing.T) {
	for _, tc := range []struct{ endpoint, traces, metrics string }{
		{"http://collector:4318", "http://collector:4318/v1/traces", "http://collector:4318/v1/metrics"},
		{"http://collector:4318/", "http://collector:4318/v1/traces", "http://collector:4318/v1/metrics"},
		{"https://c.example/otlp", "https://c.example/otlp/v1/traces", "https://c.example/otlp/v1/metrics"},
		{"http://c:4318/otlp/v1/traces", "http://c:4318/otlp/v1/traces", "http://c:4318/otlp/v1/metrics"},
		{"http://c:4318/v1/metrics", "http://c:4318/v1/traces", "http://c:4318/v1/metrics"},
	} {
		tr, err1 := otlpURL(tc.endpoint, "traces")
		me, err2 := otlpURL(tc.endpoint, "metrics")
		if err1 != nil || err2 != nil || tr != tc.traces || me != tc.metrics {
			t.Errorf("%s: %s %s (%v, %v), want %s %s", tc.endpoint, tr, me, err1, err2, tc.traces, tc.metrics)
		}
	}
}
