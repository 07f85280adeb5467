package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/store/memstore"
)

// answer is an upstream in process: every request gets 201 and a small JSON body, with no
// network between the gateway and it.
type answer struct{}

func (answer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	body := `{"id":"ch_1","amount":1000,"currency":"eur","status":"succeeded"}`
	return &http.Response{StatusCode: http.StatusCreated, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r}, nil
}

// BenchmarkOTLPOverhead measures the gateway (memory store, an upstream in process) on a new
// key per request and on a replayed key, without OTLP export (off) and with --otlp-endpoint
// pointing at a local collector that accepts and discards what it gets (otlp): every request
// traced (a server span, claim, effect, complete) and measured, spans exported in batches,
// metrics at the default interval.
func BenchmarkOTLPOverhead(b *testing.B) {
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer col.Close()
	for _, path := range []string{"newkey", "replay"} {
		for _, mode := range []string{"off", "otlp"} {
			b.Run(path+"/"+mode, func(b *testing.B) {
				cfg := Config{Upstream: "http://upstream.test", Scope: ScopeNone}
				if mode == "otlp" {
					cfg.OTLPEndpoint = col.URL
				}
				g, err := New(context.Background(), cfg, Options{Store: memstore.New(), Transport: answer{},
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				defer g.Close()
				send := func(key string) {
					r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":1000,"currency":"eur"}`))
					r.Header.Set("Idempotency-Key", key)
					w := httptest.NewRecorder()
					g.ServeHTTP(w, r)
					if w.Code != http.StatusCreated {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
				if path == "replay" {
					send("k")
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					key := "k"
					if path == "newkey" {
						key = "k" + strconv.Itoa(i)
					}
					send(key)
					i++
				}
			})
		}
	}
}
