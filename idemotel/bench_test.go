package idemotel_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/store/memstore"
)

const benchBody = `{"amount":1000,"currency":"eur"}`

func benchHandler(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"id":"ch_1","amount":1000,"currency":"eur","status":"succeeded"}`)
}

// benchServer is the idemhttp middleware (memstore, a local cache for hot replays, default
// options otherwise) with the given observer, wrapped in Handler when traced.
func benchServer(b *testing.B, obs idem.Observer, opt *idemotel.Options) http.Handler {
	eng, err := idem.New(memstore.New(), idem.Options{CacheSize: 4096, Logger: quiet, Observer: obs})
	if err != nil {
		b.Fatal(err)
	}
	mw, err := idemhttp.New(idemhttp.Options{Runner: eng, Logger: quiet, Scope: idemhttp.SingleCaller()})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(http.HandlerFunc(benchHandler))
	if opt != nil {
		h = idemotel.Handler(h, *opt)
	}
	return h
}

// BenchmarkOverhead measures the idemhttp middleware's new-key and replay paths with no
// observer, with idemotel over no-op providers, and with idemotel over the SDK (every span
// exported synchronously to an in-memory exporter, metrics aggregated for a manual reader).
func BenchmarkOverhead(b *testing.B) {
	for _, path := range []string{"newkey", "replay"} {
		for _, mode := range []string{"none", "noop", "sdk"} {
			b.Run(path+"/"+mode, func(b *testing.B) {
				var h http.Handler
				var exp *tracetest.InMemoryExporter
				switch mode {
				case "none":
					h = benchServer(b, nil, nil)
				case "noop":
					opt := idemotel.Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}
					obs, _ := idemotel.Observer(opt)
					h = benchServer(b, obs, &opt)
				case "sdk":
					exp = tracetest.NewInMemoryExporter()
					tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
					mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
					b.Cleanup(func() {
						_ = tp.Shutdown(context.Background())
						_ = mp.Shutdown(context.Background())
					})
					opt := idemotel.Options{TracerProvider: tp, MeterProvider: mp, Store: "memory"}
					obs, err := idemotel.Observer(opt)
					if err != nil {
						b.Fatal(err)
					}
					h = benchServer(b, obs, &opt)
				}
				send := func(key string) {
					req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(benchBody))
					req.Header.Set("Idempotency-Key", key)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusCreated {
						b.Fatalf("status %d", w.Code)
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
					if i++; exp != nil && i%1024 == 0 {
						exp.Reset()
					}
				}
			})
		}
	}
}
