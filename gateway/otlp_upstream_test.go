package gateway

import (
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem/store/memstore"
)

// spanCollector is an OTLP/HTTP trace receiver that keeps every span whole.
type spanCollector struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (c *spanCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &req)
	}
	if err != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			v := kv.GetValue()
			if s := v.GetStringValue(); s != "" {
				return s
			}
			return strconv.FormatInt(v.GetIntValue(), 10)
		}
	}
	return ""
}

// TestOTLPUpstreamTraceConnected: the upstream behind the gateway receives a traceparent
// whose parent is the gateway's client span for the upstream call, itself a child of the
// gateway's server span ("POST /v1/charges", the route's template), with and without a
// trace from the client: client → gateway → upstream is one trace.
func TestOTLPUpstreamTraceConnected(t *testing.T) {
	for _, withClient := range []bool{true, false} {
		t.Run(map[bool]string{true: "client trace", false: "no client trace"}[withClient], func(t *testing.T) {
			col := &spanCollector{}
			srv := httptest.NewServer(col)
			t.Cleanup(srv.Close)
			got := make(chan string, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.Header.Get("Traceparent")
				w.WriteHeader(http.StatusCreated)
			}))
			t.Cleanup(up.Close)
			t.Setenv("OTEL_METRICS_EXPORTER", "none")
			g, err := New(context.Background(), Config{Upstream: up.URL, Scope: ScopeNone, OTLPEndpoint: srv.URL,
				Routes: []Route{{Method: http.MethodPost, Path: "/v1/charges"}}},
				Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":1}`))
			r.Header.Set("Idempotency-Key", "k1")
			if withClient {
				r.Header.Set("Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
			}
			w := httptest.NewRecorder()
			g.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			tp := <-got
			parent := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
				propagation.HeaderCarrier{"Traceparent": []string{tp}}))
			if !parent.IsValid() {
				t.Fatalf("upstream received traceparent %q", tp)
			}

			col.mu.Lock()
			defer col.mu.Unlock()
			var server, client *tracepb.Span
			for _, s := range col.spans {
				switch s.GetKind() {
				case tracepb.Span_SPAN_KIND_SERVER:
					server = s
				case tracepb.Span_SPAN_KIND_CLIENT:
					client = s
				}
			}
			if server == nil || client == nil {
				t.Fatalf("server span %v, client span %v", server, client)
			}
			if server.GetName() != "POST /v1/charges" || spanAttr(server, "http.route") != "/v1/charges" ||
				spanAttr(server, "http.response.status_code") != "201" {
				t.Errorf("server span %q, attributes %v", server.GetName(), server.GetAttributes())
			}
			if hex.EncodeToString(client.GetSpanId()) != parent.SpanID().String() ||
				hex.EncodeToString(client.GetTraceId()) != parent.TraceID().String() {
				t.Errorf("upstream's parent %v, want the gateway's client span %x", parent, client.GetSpanId())
			}
			// The upstream call is the effect: the client span is under idem.effect, under the
			// server span.
			byID := map[string]*tracepb.Span{}
			for _, s := range col.spans {
				byID[hex.EncodeToString(s.GetSpanId())] = s
			}
			var chain []string
			for s := client; s != nil && s != server; s = byID[hex.EncodeToString(s.GetParentSpanId())] {
				chain = append(chain, s.GetName())
				if len(chain) > 10 {
					break
				}
			}
			if p := byID[hex.EncodeToString(client.GetParentSpanId())]; p == nil || p.GetName() != "idem.effect" {
				t.Errorf("client span's parent is not idem.effect: chain %v", chain)
			}
			if len(chain) > 10 || !isAncestor(byID, server, client) {
				t.Errorf("client span not under the server span: chain %v", chain)
			}
			if withClient {
				if got := hex.EncodeToString(server.GetTraceId()); got != clientTrace {
					t.Errorf("trace %s, want the client's %s", got, clientTrace)
				}
				if got := hex.EncodeToString(server.GetParentSpanId()); got != clientSpan {
					t.Errorf("server span's parent %s, want the client's %s", got, clientSpan)
				}
			}
		})
	}
}

// isAncestor reports whether a is an ancestor of s among the spans by id.
func isAncestor(byID map[string]*tracepb.Span, a, s *tracepb.Span) bool {
	for i := 0; s != nil && i < 20; i++ {
		p := hex.EncodeToString(s.GetParentSpanId())
		if p == hex.EncodeToString(a.GetSpanId()) {
			return true
		}
		s = byID[p]
	}
	return false
}
