package load

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHistogramQuantiles(t *testing.T) {
	t.Parallel()
	var h Histogram
	vals := make([]time.Duration, 100_000)
	for i := range vals {
		vals[i] = time.Duration(rand.ExpFloat64() * float64(200*time.Microsecond))
		h.Record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999} {
		want := vals[int(q*float64(len(vals)))-1]
		got := h.Quantile(q)
		if d := float64(got-want) / float64(want); d > 0.01 || d < -0.01 {
			t.Errorf("q%.3f = %s, want %s within 1%%", q, got, want)
		}
	}
	if h.Count() != uint64(len(vals)) || h.Max() != vals[len(vals)-1] {
		t.Errorf("count %d max %s, want %d and %s", h.Count(), h.Max(), len(vals), vals[len(vals)-1])
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 {
		t.Error("empty histogram has a quantile")
	}
}

func TestHistogramBuckets(t *testing.T) {
	t.Parallel()
	prev := -1
	for v := time.Duration(0); v < 1<<22; v += 7 {
		b := bucketOf(v)
		if b < prev {
			t.Fatalf("bucket of %d is %d, below the previous %d", v, b, prev)
		}
		prev = b
		mid := bucketValue(b)
		if d := float64(mid-v) / float64(v+1); d > 0.008 || d < -0.008 {
			t.Fatalf("value %d lands in bucket %d of middle %d", v, b, mid)
		}
	}
	if b := bucketOf(time.Duration(1) << 62); b != histBuckets-1 {
		t.Errorf("huge value in bucket %d, want the last %d", b, histBuckets-1)
	}
	if b := bucketOf(-5); b != 0 {
		t.Errorf("negative value in bucket %d, want 0", b)
	}
}

// keyServer records the keys it sees, and answers as a replaying server would.
type keyServer struct {
	mu   sync.Mutex
	seen map[string]int
}

func (s *keyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.seen[k]++
	n := s.seen[k]
	s.mu.Unlock()
	if k != "" && n > 1 {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	_, _ = w.Write([]byte(`{"ok":true}`))
}

func TestRunModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []Mode{NoKey, NewKey, Replay} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ks := &keyServer{seen: map[string]int{}}
			srv := httptest.NewServer(ks)
			defer srv.Close()
			res, err := Run(context.Background(), Options{URL: srv.URL, Mode: mode, Clients: 8, Requests: 500, Duration: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests != 500 || res.Errors != 0 || res.Status[200] != 500 {
				t.Fatalf("result %s, statuses %v", res, res.Status)
			}
			ks.mu.Lock()
			defer ks.mu.Unlock()
			switch mode {
			case NoKey:
				if len(ks.seen) != 1 || ks.seen[""] != 500 {
					t.Errorf("keys seen %d, want only the empty one", len(ks.seen))
				}
			case NewKey:
				if len(ks.seen) != 500 {
					t.Errorf("%d distinct keys, want 500", len(ks.seen))
				}
				for k := range ks.seen {
					if len(k) != 36 {
						t.Fatalf("key %q is not 36 bytes", k)
					}
				}
			case Replay:
				if len(ks.seen) != 8 || res.Replayed != 500 {
					t.Errorf("%d distinct keys and %d replays, want 8 and 500", len(ks.seen), res.Replayed)
				}
			}
		})
	}
}

func TestRunDurationAndErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond)
		w.WriteHeader(http.StatusConflict)
	}))
	defer srv.Close()
	start := time.Now()
	res, err := Run(context.Background(), Options{URL: srv.URL, Clients: 4, Warmup: 100 * time.Millisecond, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("run took %s, want about 400ms", took)
	}
	if res.Elapsed != 300*time.Millisecond {
		t.Errorf("window %s, want 300ms", res.Elapsed)
	}
	if res.Requests == 0 || res.Errors != res.Requests || res.Status[409] != res.Requests || res.FirstError != "status 409" {
		t.Errorf("result %s, statuses %v, first error %q", res, res.Status, res.FirstError)
	}
}

func TestRunOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o     Options
		field string
	}{
		{Options{}, "Options.URL"},
		{Options{URL: "http://127.0.0.1:1", Mode: "sometimes"}, "Options.Mode"},
		{Options{URL: "http://127.0.0.1:1", Clients: -1}, "Options.Clients"},
		{Options{URL: "http://127.0.0.1:1", KeyPrefix: "012345678901234567890"}, "Options.KeyPrefix"},
		{Options{URL: "http://127.0.0.1:1", Duration: -time.Second}, "Options.Duration"},
	} {
		_, err := Run(context.Background(), tc.o)
		var oe *idem.OptionError
		if !errors.Is(err, idem.ErrInvalidInput) || !errors.As(err, &oe) || oe.Package != "load" || oe.Field != tc.field ||
			!strings.HasPrefix(err.Error(), "load: invalid options: "+tc.field+" ") {
			t.Errorf("Run(%+v) = %v, want an *idem.OptionError of load naming %s", tc.o, err, tc.field)
		}
	}
	// A server that cannot be reached: priming a replay key fails, and says why.
	if _, err := Run(context.Background(), Options{URL: "http://127.0.0.1:1", Mode: Replay, Clients: 2}); err == nil {
		t.Error("priming against a closed port succeeded")
	}
}

// With H2C the clients speak HTTP/2 without TLS and share connections.
func TestRunH2C(t *testing.T) {
	t.Parallel()
	var h2, other, conns sync.Map
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 {
			h2.Store(r.Header.Get("Idempotency-Key"), true)
		} else {
			other.Store(r.Proto, true)
		}
		conns.Store(r.RemoteAddr, true)
	}))
	srv.Config.Protocols = &protocols
	srv.Start()
	defer srv.Close()
	res, err := Run(context.Background(), Options{URL: srv.URL, Mode: NewKey, Clients: 64, Requests: 500, Duration: 20 * time.Second, H2C: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 500 || res.Errors != 0 {
		t.Fatalf("result %s", res)
	}
	n, c := 0, 0
	h2.Range(func(any, any) bool { n++; return true })
	conns.Range(func(any, any) bool { c++; return true })
	other.Range(func(k, _ any) bool { t.Errorf("a request came over %v", k); return true })
	if n != 500 {
		t.Errorf("%d distinct keys over HTTP/2, want 500", n)
	}
	if c >= 64 {
		t.Errorf("64 clients used %d connections: they did not share", c)
	}
}
