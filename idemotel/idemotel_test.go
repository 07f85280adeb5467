package idemotel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

var fp1, fp2 = idem.Fingerprint([]byte("one")), idem.Fingerprint([]byte("two"))

// bundle is one test's OpenTelemetry SDK with in-memory span and metric readers.
type bundle struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	opt    idemotel.Options
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	b.opt = idemotel.Options{TracerProvider: tp, MeterProvider: mp, Propagator: propagation.TraceContext{}, Store: "memory"}
	return b
}

func (b *bundle) engine(t *testing.T, store idem.Store, opt idem.Options) *idem.Engine {
	t.Helper()
	obs, err := idemotel.Observer(b.opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.Observer, opt.Logger = obs, quiet
	e, err := idem.New(store, opt)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// ended returns the ended spans since the last call, and checks that none carries a
// forbidden string in its name, attributes, events or status.
func (b *bundle) ended(t *testing.T, forbidden ...string) []sdktrace.ReadOnlySpan {
	t.Helper()
	spans := b.spans.Ended()
	for _, s := range spans {
		text := []string{s.Name(), s.Status().Description}
		for _, kv := range s.Attributes() {
			text = append(text, string(kv.Key), kv.Value.String())
		}
		for _, ev := range s.Events() {
			text = append(text, ev.Name)
			for _, kv := range ev.Attributes {
				text = append(text, kv.Value.String())
			}
		}
		for _, f := range forbidden {
			for _, x := range text {
				if strings.Contains(x, f) {
					t.Errorf("span %s carries %q: %q", s.Name(), f, x)
				}
			}
		}
	}
	b.spans.Reset()
	return spans
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value.String()
		}
	}
	return ""
}

// find returns the spans named name.
func find(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func one(t *testing.T, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	f := find(spans, name)
	if len(f) != 1 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name())
		}
		t.Fatalf("%d spans named %s among %v", len(f), name, names)
	}
	return f[0]
}

// sums collects the metrics: counters and up-down counters by name and attribute set
// ("name{k=v,...}"), histograms as their count.
func (b *bundle) sums(t *testing.T) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := b.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+"{"+p.Attributes.Encoded(attribute.DefaultEncoder())+"}"] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name+"{"+p.Attributes.Encoded(attribute.DefaultEncoder())+"}"] += int64(p.Count)
				}
			}
		}
	}
	return out
}

func ok(context.Context) (idem.Response, error) { return idem.Response{Status: 201}, nil }

func TestEngineSpansAndMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	store := memstore.New()
	e := b.engine(t, store, idem.Options{Lease: 2 * time.Second, CacheSize: 8})
	ctx := context.Background()

	if _, err := e.Do(ctx, "scope-secret|k1", fp1, ok); err != nil {
		t.Fatal(err)
	}
	spans := b.ended(t, "scope-secret")
	claim := one(t, spans, "idem.claim")
	if attr(claim, idemotel.AttrOutcome) != "new" || attr(claim, idemotel.AttrKey) != "k1" ||
		attr(claim, idemotel.AttrAttempt) != "1" || attr(claim, idemotel.AttrLeaseMS) != "2000" ||
		attr(claim, idemotel.AttrStore) != "memory" {
		t.Errorf("claim attributes: %v", claim.Attributes())
	}
	effect, complete := one(t, spans, "idem.effect"), one(t, spans, "idem.complete")
	if attr(effect, idemotel.AttrOutcome) != "kept" || attr(complete, idemotel.AttrOutcome) != "ok" {
		t.Errorf("effect %v, complete %v", effect.Attributes(), complete.Attributes())
	}
	if complete.Parent().SpanID() != effect.SpanContext().SpanID() {
		t.Error("complete is not a child of the effect")
	}

	// Replays: from the store, then from the cache.
	e.Do(ctx, "scope-secret|k1", fp1, ok)
	e.Do(ctx, "scope-secret|k1", fp1, ok)
	replays := find(b.ended(t, "scope-secret"), "idem.replay")
	if len(replays) != 2 || attr(replays[0], idemotel.AttrOutcome) != "replay" || attr(replays[1], idemotel.AttrCached) != "true" {
		t.Errorf("replays: %d", len(replays))
	}

	// Another payload.
	if _, err := e.Do(ctx, "scope-secret|k1", fp2, ok); !errors.Is(err, idem.ErrMismatch) {
		t.Fatal(err)
	}
	if s := one(t, b.ended(t, "scope-secret"), "idem.claim"); attr(s, idemotel.AttrOutcome) != "mismatch" {
		t.Errorf("mismatch claim: %v", s.Attributes())
	}

	// Uncertain.
	e.Do(ctx, "scope-secret|u", fp1, func(context.Context) (idem.Response, error) { return idem.Response{}, idem.Uncertain(nil) })
	if s := one(t, b.ended(t, "scope-secret"), "idem.effect"); attr(s, idemotel.AttrOutcome) != "uncertain" {
		t.Errorf("uncertain effect: %v", s.Attributes())
	}

	// In flight.
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		e.Do(ctx, "scope-secret|f", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-release
			return idem.Response{Status: 200}, nil
		})
	}()
	<-started
	if _, err := e.Do(ctx, "scope-secret|f", fp1, ok); !errors.Is(err, idem.ErrInFlight) {
		t.Fatal(err)
	}
	if got := b.sums(t)["idem.claims.in_flight{idem.store=memory}"]; got != 1 {
		t.Errorf("in-flight claims while one runs = %d, want 1", got)
	}
	close(release)
	<-done
	var outcomes []string
	for _, s := range find(b.ended(t, "scope-secret"), "idem.claim") {
		outcomes = append(outcomes, attr(s, idemotel.AttrOutcome))
	}
	if !slices.Contains(outcomes, "in_flight") {
		t.Errorf("claims %v, want an in_flight one", outcomes)
	}

	// Takeover: a holder that never completes, its lease run out.
	if _, err := store.Reserve(ctx, idem.ReserveRequest{Key: "scope-secret|t", Fingerprint: fp1, Now: time.Now().Add(-time.Minute), Lease: time.Second, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Do(ctx, "scope-secret|t", fp1, ok); err != nil {
		t.Fatal(err)
	}
	claim = one(t, b.ended(t, "scope-secret"), "idem.claim")
	if attr(claim, idemotel.AttrTakeover) != "true" || attr(claim, idemotel.AttrAttempt) != "2" ||
		len(claim.Events()) != 1 || claim.Events()[0].Name != "idem.takeover" {
		t.Errorf("takeover claim: %v %v", claim.Attributes(), claim.Events())
	}

	// The store gone.
	store.Close()
	if _, err := e.Do(ctx, "scope-secret|down", fp1, ok); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatal(err)
	}
	claim = one(t, b.ended(t, "scope-secret"), "idem.claim")
	if attr(claim, idemotel.AttrOutcome) != "store_error" || claim.Status().Description != "store_error" {
		t.Errorf("store error claim: %v %v", claim.Attributes(), claim.Status())
	}

	m := b.sums(t)
	for name, want := range map[string]int64{
		"idem.outcomes{idem.outcome=new,idem.stage=claim,idem.store=memory}":          4,
		"idem.outcomes{idem.outcome=replay,idem.stage=claim,idem.store=memory}":       2,
		"idem.outcomes{idem.outcome=mismatch,idem.stage=claim,idem.store=memory}":     1,
		"idem.outcomes{idem.outcome=in_flight,idem.stage=claim,idem.store=memory}":    1,
		"idem.outcomes{idem.outcome=store_error,idem.stage=claim,idem.store=memory}":  1,
		"idem.outcomes{idem.outcome=uncertain,idem.stage=effect,idem.store=memory}":   1,
		"idem.outcomes{idem.outcome=kept,idem.stage=effect,idem.store=memory}":        3,
		"idem.cache.hits{idem.store=memory}":                                          2, // a replay and a mismatch
		"idem.takeovers{idem.store=memory}":                                           1,
		"idem.uncertain{idem.store=memory}":                                           1,
		"idem.claims.in_flight{idem.store=memory}":                                    0,
		"idem.store.duration{idem.outcome=ok,idem.stage=complete,idem.store=memory}":  3,
		"idem.store.duration{idem.outcome=new,idem.stage=claim,idem.store=memory}":    4,
		"idem.store.duration{idem.outcome=replay,idem.stage=claim,idem.store=memory}": 1,
	} {
		if got, ok := m[name]; got != want || !ok {
			t.Errorf("%s = %d (present %v), want %d", name, got, ok, want)
		}
	}
}

// TestHTTPTraceContinues: idemclient → idemhttp server → handler is one trace: an intent span
// with one child per attempt, the server's spans under the attempt that reached it, the
// engine's under the server's, and no scope or body on any span.
func TestHTTPTraceContinues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.engine(t, memstore.New(), idem.Options{})
	const scope, body = "tenant-credential-123", `{"card":"4242-secret-body"}`
	mw, err := idemhttp.New(idemhttp.Options{Runner: e, Logger: quiet,
		Scope: func(*http.Request) (string, error) { return scope, nil }})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var handlerTrace atomic.Value
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // released: the client retries
			return
		}
		handlerTrace.Store(trace.SpanContextFromContext(r.Context()))
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1"}`)
	})
	srv := httptest.NewServer(idemotel.Handler(mw(app), b.opt))
	defer srv.Close()

	rt, err := idemclient.New(idemclient.Options{
		Base: idemotel.Transport(srv.Client().Transport, b.opt), BaseDelay: time.Millisecond, NewKey: func() string { return "order-42" }})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: idemotel.Intent(rt, b.opt)}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The server's spans end when its handler returns, which may be after the client has the
	// answer.
	deadline := time.Now().Add(10 * time.Second)
	for len(find(b.spans.Ended(), "POST")) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	spans := b.ended(t, scope, idemhttp.HashScope(scope), "4242", "secret-body")

	intent := one(t, spans, "idem.intent")
	if attr(intent, idemotel.AttrKey) != "order-42" || attr(intent, idemotel.AttrAttempt) != "2" {
		t.Errorf("intent: %v", intent.Attributes())
	}
	attempts := find(spans, "idem.attempt")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	tid := intent.SpanContext().TraceID()
	for i, a := range attempts {
		if a.Parent().SpanID() != intent.SpanContext().SpanID() || attr(a, idemotel.AttrKey) != "order-42" {
			t.Errorf("attempt %d: parent %v, attributes %v", i, a.Parent(), a.Attributes())
		}
	}
	requests := find(spans, "POST")
	if len(requests) != 2 {
		t.Fatalf("%d server spans, want 2", len(requests))
	}
	attemptIDs := map[trace.SpanID]bool{attempts[0].SpanContext().SpanID(): true, attempts[1].SpanContext().SpanID(): true}
	serverIDs := map[trace.SpanID]bool{}
	for _, r := range requests {
		if r.SpanContext().TraceID() != tid || !r.Parent().IsRemote() || !attemptIDs[r.Parent().SpanID()] {
			t.Errorf("server span not continued from an attempt: trace %v parent %v", r.SpanContext().TraceID(), r.Parent())
		}
		serverIDs[r.SpanContext().SpanID()] = true
	}
	for _, s := range append(find(spans, "idem.claim"), find(spans, "idem.effect")...) {
		if s.SpanContext().TraceID() != tid || !serverIDs[s.Parent().SpanID()] {
			t.Errorf("%s not under a server span", s.Name())
		}
		if attr(s, idemotel.AttrKey) != "order-42" {
			t.Errorf("%s idem.key = %q, want the client key only", s.Name(), attr(s, idemotel.AttrKey))
		}
	}
	if sc, _ := handlerTrace.Load().(trace.SpanContext); sc.TraceID() != tid {
		t.Errorf("the handler runs in trace %v, want %v", sc.TraceID(), tid)
	}
	var effects []string
	for _, s := range find(spans, "idem.effect") {
		effects = append(effects, attr(s, idemotel.AttrOutcome))
	}
	if strings.Join(effects, ",") != "released,kept" {
		t.Errorf("effects %v, want released then kept", effects)
	}
}

func TestClientKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"s|k": "k", "|k": "k", "k": "k", "s|k|x": "k|x", "": ""} {
		if got := idemotel.ClientKey(in); got != want {
			t.Errorf("ClientKey(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestObserverConcurrent: many goroutines on few keys through one traced engine; every Do
// leaves one claim span, the in-flight gauge returns to zero, and the outcome counter adds up.
func TestObserverConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.engine(t, memstore.New(), idem.Options{Wait: 5 * time.Second, PollInterval: time.Millisecond, CacheSize: 4})
	const workers, each = 8, 50
	var runs atomic.Int64
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				fp := fp1
				if (w+i)%5 == 0 {
					fp = fp2
				}
				e.Do(context.Background(), "s|k"+strconv.Itoa(i%7), fp, func(context.Context) (idem.Response, error) {
					runs.Add(1)
					return idem.Response{Status: 200}, nil
				})
			}
		}()
	}
	for range workers {
		<-done
	}
	spans := b.ended(t, "s|")
	claims := len(find(spans, "idem.claim")) + len(find(spans, "idem.replay"))
	if claims != workers*each {
		t.Errorf("%d claim spans, want %d", claims, workers*each)
	}
	m := b.sums(t)
	var claimed int64
	for name, v := range m {
		if strings.HasPrefix(name, "idem.outcomes{") && strings.Contains(name, "idem.stage=claim") {
			claimed += v
		}
	}
	if claimed != workers*each || m["idem.claims.in_flight{idem.store=memory}"] != 0 ||
		m["idem.outcomes{idem.outcome=kept,idem.stage=effect,idem.store=memory}"] != runs.Load() {
		t.Errorf("claims counted %d, in flight %d, kept %d (runs %d)", claimed,
			m["idem.claims.in_flight{idem.store=memory}"], m["idem.outcomes{idem.outcome=kept,idem.stage=effect,idem.store=memory}"], runs.Load())
	}
}
