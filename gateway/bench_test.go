package gateway_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/gateway"
)

// These benchmarks isolate what the gateway adds to a request on top of a bare
// httputil.ReverseProxy: both call the same in-memory upstream (a RoundTripper that answers
// 201 at once), so sockets and the upstream's work are out of the picture. The figures that
// matter are the differences in ns/op and allocs/op between BenchmarkBareProxy and the
// gateway's cases.

var benchBody = []byte(`{"amount":1000,"currency":"eur","customer":"cus_123456"}`)

var upstreamAnswer = []byte(`{"id":"ch_1","object":"charge","amount":1000,"currency":"eur","status":"succeeded"}` + "\n")

// cannedUpstream answers every request with 201 and upstreamAnswer, after reading its body.
type cannedUpstream struct{}

func (cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{
		StatusCode: http.StatusCreated, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(upstreamAnswer))}},
		Body:          io.NopCloser(bytes.NewReader(upstreamAnswer)),
		ContentLength: int64(len(upstreamAnswer)),
		Request:       r,
	}, nil
}

// discard is a ResponseWriter that keeps the status and drops the body.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(code int)        { d.status = code }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) Flush()                      {}

type benchBufferPool struct{ p sync.Pool }

func (b *benchBufferPool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b *benchBufferPool) Put(x []byte) { b.p.Put(&x) }

// serve runs b.N requests through h, key(i) giving each its Idempotency-Key ("" for none).
func serve(b *testing.B, h http.Handler, key func(i int64) string, want int) {
	b.Helper()
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		w := &discard{h: http.Header{}}
		body := bytes.NewReader(benchBody)
		for pb.Next() {
			i := n.Add(1)
			body.Reset(benchBody)
			r, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://gateway.test/v1/charges", io.NopCloser(body))
			r.ContentLength = int64(len(benchBody))
			r.RemoteAddr = "127.0.0.1:40000"
			r.Header.Set("Content-Type", "application/json")
			if k := key(i); k != "" {
				r.Header.Set("Idempotency-Key", k)
			}
			clear(w.h)
			w.status = 0
			h.ServeHTTP(w, r)
			if w.status != want {
				b.Fatalf("status %d, want %d", w.status, want)
			}
		}
	})
}

func noKey(int64) string { return "" }

func newBenchGateway(b *testing.B) *gateway.Gateway {
	b.Helper()
	g, err := gateway.New(context.Background(), gateway.Config{Upstream: "http://upstream.test", Store: "memory://", Scope: gateway.ScopeNone},
		gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Transport: cannedUpstream{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = g.Close() })
	return g
}

// BenchmarkBareProxy is the baseline: a tuned ReverseProxy, as the load benchmark's bare hop.
func BenchmarkBareProxy(b *testing.B) {
	up, _ := url.Parse("http://upstream.test")
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(up); pr.SetXForwarded() },
		Transport:  cannedUpstream{},
		BufferPool: &benchBufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}},
	}
	serve(b, rp, noKey, http.StatusCreated)
}

// BenchmarkGatewayPassThrough: a POST without a key, proxied untouched.
func BenchmarkGatewayPassThrough(b *testing.B) {
	serve(b, newBenchGateway(b), noKey, http.StatusCreated)
}

// BenchmarkGatewayNewKey: a new key per request on the memory store (claim, proxy, store).
func BenchmarkGatewayNewKey(b *testing.B) {
	serve(b, newBenchGateway(b), func(i int64) string { return "k-" + strconv.FormatInt(i, 10) }, http.StatusCreated)
}

// BenchmarkGatewayReplay: the same key every time after the first: replays.
func BenchmarkGatewayReplay(b *testing.B) {
	g := newBenchGateway(b)
	r, _ := http.NewRequest(http.MethodPost, "http://gateway.test/v1/charges", bytes.NewReader(benchBody))
	r.Header.Set("Idempotency-Key", "replayed-key")
	g.ServeHTTP(&discard{h: http.Header{}}, r) // the original; every request after it replays
	serve(b, g, func(int64) string { return "replayed-key" }, http.StatusCreated)
}
