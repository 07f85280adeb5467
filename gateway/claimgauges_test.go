package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/prometheus/client_golang/prometheus"
)

// gauge returns the value of the unlabelled gauge name, and whether it is exported.
func gauge(t *testing.T, g *Gateway, name string) (float64, bool) {
	t.Helper()
	mfs, err := g.gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func quietGateway(t *testing.T, cfg Config) *Gateway {
	t.Helper()
	g, err := New(context.Background(), cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

// TestClaimsOverdue: idem_claims_overdue counts the claims the gateway holds in flight for
// longer than its upstream timeout plus its lease, and no others: many concurrent claims
// under way are 0 until the clock passes that bound, and 0 again once they finish.
func TestClaimsOverdue(t *testing.T) {
	t.Parallel()
	const n = 8
	var arrived sync.WaitGroup
	arrived.Add(n)
	unblock := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		arrived.Done()
		<-unblock
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	g := quietGateway(t, Config{Upstream: up.URL, Store: "memory://", Scope: ScopeNone,
		UpstreamTimeout: Duration(20 * time.Second), Lease: Duration(10 * time.Second)})
	var skew atomic.Int64 // how far the claims' clock is ahead of the wall clock
	g.claims.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }

	var done sync.WaitGroup
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":1}`))
			r.Header.Set("Idempotency-Key", fmt.Sprintf("overdue-%d", i))
			w := httptest.NewRecorder()
			g.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				t.Errorf("request %d: %d", i, w.Code)
			}
		}()
	}
	arrived.Wait()
	if v, ok := gauge(t, g, "idem_claims_overdue"); !ok || v != 0 {
		t.Fatalf("claims just begun: idem_claims_overdue %v (exported %v), want 0", v, ok)
	}
	skew.Store(int64(29 * time.Second)) // within upstream timeout + lease (30s)
	if v, _ := gauge(t, g, "idem_claims_overdue"); v != 0 {
		t.Fatalf("claims 29s old, bound 30s: idem_claims_overdue %v, want 0", v)
	}
	skew.Store(int64(31 * time.Second))
	if v, _ := gauge(t, g, "idem_claims_overdue"); v != n {
		t.Fatalf("claims 31s old, bound 30s: idem_claims_overdue %v, want %d", v, n)
	}
	close(unblock)
	done.Wait()
	if v, _ := gauge(t, g, "idem_claims_overdue"); v != 0 {
		t.Fatalf("claims finished: idem_claims_overdue %v, want 0", v)
	}
}

// TestKeysHeld: with uncertain: hold, a request whose upstream took it and gave no answer
// leaves its key held, and idem_keys_held counts it through the store; the count is redone
// at most once per interval, and a key released by an operator is no longer counted.
func TestKeysHeld(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close() // taken, no answer: uncertain
		}
	}))
	t.Cleanup(up.Close)
	g := quietGateway(t, Config{Upstream: up.URL, Store: "memory://", Scope: ScopeNone, Uncertain: "hold", Lease: Duration(2 * time.Second)})
	var skew atomic.Int64
	g.held.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	post := func(key string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != http.StatusBadGateway {
			t.Fatalf("%s: %d, want 502", key, w.Code)
		}
	}
	if v, ok := gauge(t, g, "idem_keys_held"); !ok || v != 0 {
		t.Fatalf("nothing held: idem_keys_held %v (exported %v), want 0", v, ok)
	}
	post("held-1")
	post("held-2")
	if v, _ := gauge(t, g, "idem_keys_held"); v != 0 {
		t.Fatalf("within the interval the last count stands: idem_keys_held %v, want 0", v)
	}
	skew.Store(int64(time.Minute))
	if v, _ := gauge(t, g, "idem_keys_held"); v != 2 {
		t.Fatalf("two keys held: idem_keys_held %v, want 2", v)
	}
	if at, _ := gauge(t, g, "idem_keys_held_counted_timestamp_seconds"); time.Since(time.Unix(int64(at), 0)) > -time.Minute+5*time.Second {
		t.Errorf("counted at %v, want the count's time (a minute ahead)", time.Unix(int64(at), 0))
	}
	// The operator releases one (as `idem release --force` does).
	page, err := g.store.(idem.Lister).List(context.Background(), idem.ListQuery{State: idem.StateInProgress})
	if err != nil || len(page.Records) != 2 {
		t.Fatalf("in-progress records: %v %+v", err, page)
	}
	rec := page.Records[0]
	if err := g.store.Release(context.Background(), rec.Key, rec.Token); err != nil {
		t.Fatal(err)
	}
	skew.Store(int64(2 * time.Minute))
	if v, _ := gauge(t, g, "idem_keys_held"); v != 1 {
		t.Fatalf("one released: idem_keys_held %v, want 1", v)
	}
	if v, _ := gauge(t, g, "idem_keys_held_count_truncated"); v != 0 {
		t.Errorf("idem_keys_held_count_truncated %v, want 0", v)
	}
}

// TestCountHeldBounded: the count reads at most heldCount in-progress records and says when
// it stopped there; running claims and completed records are not held.
func TestCountHeldBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	for _, tc := range []struct {
		records   int
		wantHeld  int
		truncated bool
	}{
		{heldCount - 1000, (heldCount - 1000) / 2, false},
		{heldCount + 50, heldCount / 2, true},
	} {
		st := memstore.New()
		for i := range tc.records {
			key := fmt.Sprintf("k%06d", i)
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !res.Claimed {
				t.Fatalf("reserve %s: %v %+v", key, err, res)
			}
			if i%2 == 0 { // held: the lease extended to the record's expiry
				if err := st.Extend(ctx, key, res.Record.Token, res.Record.ExpiresAt); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := range 10 {
			key := fmt.Sprintf("done%d", i)
			res, _ := st.Reserve(ctx, idem.ReserveRequest{Key: key, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err := st.Complete(ctx, key, res.Record.Token, idem.Response{Status: 201}, now, now.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		n, truncated, err := countHeld(ctx, st, now.Add(time.Second))
		if err != nil || n != tc.wantHeld || truncated != tc.truncated {
			t.Errorf("%d records, half held: counted %d, truncated %v, %v; want %d, %v", tc.records, n, truncated, err, tc.wantHeld, tc.truncated)
		}
	}
}

// countingLister is an idem.Lister with no records that counts its List calls.
type countingLister struct{ calls atomic.Int64 }

func (l *countingLister) List(context.Context, idem.ListQuery) (idem.ListPage, error) {
	l.calls.Add(1)
	return idem.ListPage{}, nil
}

// TestHeldCountOncePerInterval: the count of held keys goes to the store at the first scrape,
// then again only once a whole interval has passed since the last count began: a scrape an
// instant before gets the last count, one at the interval exactly counts again.
func TestHeldCountOncePerInterval(t *testing.T) {
	t.Parallel()
	l := &countingLister{}
	h := newHeldCollector(l, time.Minute)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, step := range []struct {
		at    time.Duration
		calls int64
	}{
		{0, 1},
		{time.Minute - time.Nanosecond, 1},
		{time.Minute, 2},
		{2*time.Minute - time.Nanosecond, 2},
		{2 * time.Minute, 3},
	} {
		h.now = func() time.Time { return t0.Add(step.at) }
		ch := make(chan prometheus.Metric, 3)
		h.Collect(ch)
		close(ch)
		if got := l.calls.Load(); got != step.calls {
			t.Fatalf("scrape at +%v: %d counts, want %d", step.at, got, step.calls)
		}
		if n := len(ch); n != 3 {
			t.Fatalf("scrape at +%v: %d metrics, want 3", step.at, n)
		}
	}
}
