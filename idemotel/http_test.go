package idemotel_test

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/store/memstore"
)

// TestHandlerSemanticConventions: the server span is named after the method and the route
// the router reports, carries the HTTP semantic conventions' attributes, and is an error on a
// 5xx only; the duration histogram has the same attributes.
func TestHandlerSemanticConventions(t *testing.T) {
	b := setup(t)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/orders/42":
			idemotel.Route(r.Context(), "/v1/orders/{id}")
			w.WriteHeader(http.StatusCreated)
		case "/boom":
			w.WriteHeader(http.StatusBadGateway)
		default:
			io.WriteString(w, "ok") // implicit 200
		}
	})
	srv := httptest.NewServer(idemotel.Handler(app, b.opt))
	defer srv.Close()
	for _, p := range []string{"/v1/orders/42", "/boom", "/plain"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+p, strings.NewReader("{}"))
		req.Header.Set("User-Agent", "idem-test/1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// A method no convention names: one series, "_OTHER", whatever a client invents.
	req, _ := http.NewRequest("BREW", srv.URL+"/plain", nil)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	srv.Close() // the spans end when the handlers return

	spans := b.ended(t)
	routed := one(t, spans, "POST /v1/orders/{id}")
	if routed.SpanKind() != trace.SpanKindServer {
		t.Errorf("kind %v, want server", routed.SpanKind())
	}
	for k, want := range map[string]string{"http.request.method": "POST", "http.route": "/v1/orders/{id}",
		"http.response.status_code": "201", "url.path": "/v1/orders/42", "url.scheme": "http",
		"server.address": "127.0.0.1", "user_agent.original": "idem-test/1", "network.protocol.version": "1.1"} {
		if got := attrStr(routed, k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if attrStr(routed, "server.port") == "" {
		t.Error("no server.port")
	}
	if routed.Status().Code == codes.Error {
		t.Error("a 201 is an error")
	}
	plain := find(spans, "POST")
	if len(plain) != 2 {
		t.Fatalf("%d spans named POST, want 2 (no route reported)", len(plain))
	}
	for _, s := range plain {
		switch attrStr(s, "url.path") {
		case "/boom":
			if s.Status().Code != codes.Error || attrStr(s, "http.response.status_code") != "502" || attrStr(s, "error.type") != "502" {
				t.Errorf("502: status %v, attributes %v", s.Status(), s.Attributes())
			}
		case "/plain":
			if s.Status().Code == codes.Error || attrStr(s, "http.response.status_code") != "200" {
				t.Errorf("implicit 200: status %v, attributes %v", s.Status(), s.Attributes())
			}
		}
		if attrStr(s, "http.route") != "" {
			t.Errorf("http.route set without a route: %v", s.Attributes())
		}
	}
	other := one(t, spans, "HTTP")
	if attrStr(other, "http.request.method") != "_OTHER" || attrStr(other, "http.request.method_original") != "BREW" {
		t.Errorf("unknown method: %v", other.Attributes())
	}

	h := histogram(t, b, "http.server.request.duration")
	if !slices.Equal(h.bounds, idemotel.HTTPDurationBounds) {
		t.Errorf("bounds %v, want %v", h.bounds, idemotel.HTTPDurationBounds)
	}
	if h.unit != "s" {
		t.Errorf("unit %q, want s", h.unit)
	}
	want := map[string]uint64{
		"http.request.method=POST,http.response.status_code=201,http.route=/v1/orders/{id},url.scheme=http":          1,
		"error.type=502,http.request.method=POST,http.response.status_code=502,url.scheme=http":                      1,
		"http.request.method=POST,http.response.status_code=200,url.scheme=http":                                     1,
		"http.request.method=_OTHER,http.request.method_original=BREW,http.response.status_code=200,url.scheme=http": 1,
	}
	if !mapsEqual(h.counts, want) {
		t.Errorf("http.server.request.duration points %v, want %v", h.counts, want)
	}
}

// TestClientTransportConnectsTrace: through a proxy whose upstream calls go through
// ClientTransport, the upstream receives a traceparent whose parent is the proxy's client
// span, itself a child of the proxy's server span: with the caller's trace (continued) and
// without one (a new trace, still connected).
func TestClientTransportConnectsTrace(t *testing.T) {
	for _, withCaller := range []bool{true, false} {
		name := map[bool]string{true: "caller trace", false: "no caller trace"}[withCaller]
		t.Run(name, func(t *testing.T) {
			b := setup(t)
			got := make(chan string, 1)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got <- r.Header.Get("Traceparent")
				w.WriteHeader(http.StatusCreated)
			}))
			defer up.Close()
			client := &http.Client{Transport: idemotel.ClientTransport(up.Client().Transport, b.opt)}
			proxy := httptest.NewServer(idemotel.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				out, _ := http.NewRequestWithContext(r.Context(), r.Method, up.URL+"/charges?secret=1", nil)
				out.Header = r.Header.Clone() // forwards the caller's traceparent, as a proxy does
				resp, err := client.Do(out)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				resp.Body.Close()
				w.WriteHeader(resp.StatusCode)
			}), b.opt))
			defer proxy.Close()

			const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
			req, _ := http.NewRequest(http.MethodPost, proxy.URL+"/charges", nil)
			if withCaller {
				req.Header.Set("Traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
			}
			resp, err := proxy.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			proxy.Close()
			tp := <-got
			spans := b.ended(t, "secret=1")
			var server sdktrace.ReadOnlySpan
			for _, s := range find(spans, "POST") {
				if s.SpanKind() == trace.SpanKindServer {
					server = s
				}
			}
			if server == nil {
				t.Fatal("no server span")
			}
			var clientSpan trace.SpanContext
			for _, s := range spans {
				if s.SpanKind() == trace.SpanKindClient {
					clientSpan = s.SpanContext()
					if s.Parent().SpanID() != server.SpanContext().SpanID() {
						t.Errorf("client span's parent %v, want the server span %v", s.Parent().SpanID(), server.SpanContext().SpanID())
					}
					if attrStr(s, "http.response.status_code") != "201" || attrStr(s, "server.address") != "127.0.0.1" ||
						attrStr(s, "url.full") != up.URL+"/charges" {
						t.Errorf("client span attributes %v", s.Attributes())
					}
				}
			}
			if !clientSpan.IsValid() {
				t.Fatal("no client span")
			}
			sc := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier{"Traceparent": []string{tp}})
			parent := trace.SpanContextFromContext(sc)
			if parent.SpanID() != clientSpan.SpanID() || parent.TraceID() != clientSpan.TraceID() {
				t.Errorf("upstream's traceparent %q: parent %v, want the client span %v", tp, parent.SpanID(), clientSpan.SpanID())
			}
			if withCaller && clientSpan.TraceID().String() != callerTrace {
				t.Errorf("trace %v, want the caller's %s", clientSpan.TraceID(), callerTrace)
			}
			h := histogram(t, b, "http.client.request.duration")
			if !slices.Equal(h.bounds, idemotel.HTTPDurationBounds) || len(h.counts) != 1 {
				t.Errorf("client duration: bounds %v, points %v", h.bounds, h.counts)
			}
		})
	}
}

// TestStoreDurationBounds: idem.store.duration has explicit bounds in seconds, so a store
// call of a millisecond does not fall in a first bucket that holds every call.
func TestStoreDurationBounds(t *testing.T) {
	b := setup(t)
	eng := b.engine(t, memstore.New(), idem.Options{})
	if _, err := eng.Do(context.Background(), "k", fp1, ok); err != nil {
		t.Fatal(err)
	}
	h := histogram(t, b, "idem.store.duration")
	if !slices.Equal(h.bounds, idemotel.StoreDurationBounds) {
		t.Fatalf("bounds %v, want %v", h.bounds, idemotel.StoreDurationBounds)
	}
	if h.unit != "s" {
		t.Errorf("unit %q", h.unit)
	}
	// An in-memory call takes well under 5 ms: with the SDK's default bounds ([0, 5, 10, …],
	// meant for milliseconds) it would fall in the (0, 5] bucket with every other call.
	if h.bounds[0] >= 0.005 {
		t.Errorf("first bound %v s cannot tell a fast call from a slow one", h.bounds[0])
	}
}

type histo struct {
	unit   string
	bounds []float64
	counts map[string]uint64 // attribute set → count
}

// histogram collects the float64 histogram named name.
func histogram(t *testing.T, b *bundle, name string) histo {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := b.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			d, isHist := m.Data.(metricdata.Histogram[float64])
			if !isHist {
				t.Fatalf("%s is a %T", name, m.Data)
			}
			h := histo{unit: m.Unit, counts: map[string]uint64{}}
			for _, p := range d.DataPoints {
				h.bounds = p.Bounds
				h.counts[p.Attributes.Encoded(attribute.DefaultEncoder())] += p.Count
			}
			return h
		}
	}
	t.Fatalf("no histogram %s", name)
	return histo{}
}

func attrStr(s sdktrace.ReadOnlySpan, k string) string { return attr(s, attribute.Key(k)) }

func mapsEqual(a, b map[string]uint64) bool { return maps.Equal(a, b) }

// TestHandlerPanic: a handler that panics ends its server span as a 500 error, and the panic
// goes on to the server untouched.
func TestHandlerPanic(t *testing.T) {
	b := setup(t)
	h := idemotel.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }), b.opt)
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want the handler's panic", p)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/x", nil))
	}()
	s := one(t, b.ended(t), "POST")
	if s.Status().Code != codes.Error || attrStr(s, "http.response.status_code") != "500" {
		t.Errorf("status %v, attributes %v", s.Status(), s.Attributes())
	}
}
