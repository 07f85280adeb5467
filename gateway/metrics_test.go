package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestUpstreamErrorOutcome: a request whose upstream call fails is counted upstream_error,
// with a key or without, and an upstream that answers 502 itself is not; no failure is left
// behind in the hand-off from the proxy to the event hook.
func TestUpstreamErrorOutcome(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(bad.Close)

	for _, tc := range []struct {
		name, upstream, key string
		status              int
		outcome             string
	}{
		{"refused, key", refused, "k1", http.StatusBadGateway, "upstream_error"},
		{"refused, no key", refused, "", http.StatusBadGateway, "upstream_error"},
		{"upstream 502, key", bad.URL, "k2", http.StatusBadGateway, "released"},
		{"upstream 502, no key", bad.URL, "", http.StatusBadGateway, "bypass"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, err := New(context.Background(), Config{Upstream: tc.upstream, Store: "memory://", Scope: ScopeNone},
				Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = g.Close() })
			r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":1}`))
			if tc.key != "" {
				r.Header.Set("Idempotency-Key", tc.key)
			}
			w := httptest.NewRecorder()
			g.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d", w.Code, tc.status)
			}
			for _, o := range []string{"upstream_error", "released", "bypass"} {
				want := 0.0
				if o == tc.outcome {
					want = 1
				}
				if got := sample(t, g, "idem_requests_total", "outcome", o); got != want {
					t.Errorf("requests_total{outcome=%q} = %v, want %v", o, got, want)
				}
			}
			result := "ok"
			if tc.outcome == "upstream_error" {
				result = "error"
			}
			if got := sample(t, g, "idem_upstream_seconds", "result", result); got != 1 {
				t.Errorf("upstream_seconds{result=%q} count %v, want 1", result, got)
			}
		})
	}
}

// sample returns the value of the counter, or the count of the histogram, named name whose
// label has the value (0 if there is none).
func sample(t *testing.T, g *Gateway, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					if h := m.GetHistogram(); h != nil {
						return float64(h.GetSampleCount())
					}
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestStoreResultLabels: idem_store_operation_seconds labels a store call by what it came to.
// A completion the fence refused (the claim was taken over) is lease_lost and a get of a key
// without a record is not_found: neither is counted as a success, nor as the store failing.
func TestStoreResultLabels(t *testing.T) {
	t.Parallel()
	m, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	st := instrument(memstore.New(), m.StoreSeconds)
	ctx, now := context.Background(), time.Now()
	fp := idem.Fingerprint([]byte("body"))
	first, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Millisecond, TTL: time.Hour})
	if err != nil || !first.Claimed {
		t.Fatalf("reserve: %+v, %v", first, err)
	}
	later := now.Add(time.Second) // the first claim's lease has run out: the second takes it over
	second, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: later, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !second.Claimed {
		t.Fatalf("takeover: %+v, %v", second, err)
	}
	if err := st.Complete(ctx, "k", first.Record.Token, idem.Response{Status: 200}, later, later.Add(time.Hour)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("complete with the taken-over token: %v, want ErrLeaseLost", err)
	}
	if err := st.Complete(ctx, "k", second.Record.Token, idem.Response{Status: 200}, later, later.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "missing"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("get of a missing key: %v, want ErrNotFound", err)
	}
	for _, tc := range []struct {
		op, result string
		want       uint64
	}{
		{"reserve", "ok", 2},
		{"complete", "ok", 1},
		{"complete", "lease_lost", 1},
		{"complete", "error", 0},
		{"get", "not_found", 1},
		{"get", "ok", 0},
		{"get", "error", 0},
	} {
		var pb dto.Metric
		if err := m.StoreSeconds.WithLabelValues(tc.op, tc.result).(prometheus.Histogram).Write(&pb); err != nil {
			t.Fatal(err)
		}
		if got := pb.GetHistogram().GetSampleCount(); got != tc.want {
			t.Errorf("store_operation_seconds{op=%q,result=%q} count = %d, want %d", tc.op, tc.result, got, tc.want)
		}
	}
}
