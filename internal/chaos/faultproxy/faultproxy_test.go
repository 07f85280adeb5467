package faultproxy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/chaos/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server counts the requests it handled and answers each with its path.
func server(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n.Add(1)
		_, _ = io.WriteString(w, "ok "+r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func newProxy(t *testing.T, target string, f faultproxy.Faults, onFault func(faultproxy.Event)) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(faultproxy.Options{Target: strings.TrimPrefix(target, "http://"), Faults: f, Seed: 7, OnFault: onFault})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func client(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// post sends a POST, which Go's Transport never retries on its own (no idempotency key).
func post(c *http.Client, url string) (string, error) {
	resp, err := c.Post(url, "text/plain", strings.NewReader("x"))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestForwardsUntouched(t *testing.T) {
	t.Parallel()
	srv, n := server(t)
	p := newProxy(t, srv.URL, faultproxy.Faults{}, nil)
	c := client(t)
	for i := range 50 {
		got, err := post(c, fmt.Sprintf("http://%s/r%d", p.Addr(), i))
		if err != nil || got != fmt.Sprintf("ok /r%d", i) {
			t.Fatalf("request %d: %q, %v", i, got, err)
		}
	}
	if n.Load() != 50 {
		t.Fatalf("server saw %d requests, want 50", n.Load())
	}
	if s := p.Stats(); s.Exchanges != 50 || s.DroppedRequests+s.DroppedResponses+s.Delays != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDropRequestNeverReachesTheServer(t *testing.T) {
	t.Parallel()
	srv, n := server(t)
	var events []faultproxy.Event
	var mu sync.Mutex
	p := newProxy(t, srv.URL, faultproxy.Faults{DropRequest: 1}, func(ev faultproxy.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	})
	c := client(t)
	for i := range 10 {
		if _, err := post(c, fmt.Sprintf("http://%s/d%d", p.Addr(), i)); err == nil {
			t.Fatalf("request %d went through", i)
		}
	}
	if n.Load() != 0 {
		t.Fatalf("server saw %d requests, want 0", n.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 10 || events[3].Kind != faultproxy.KindDropRequest || !bytes.HasPrefix(events[3].Head, []byte("POST /d3 HTTP/1.1")) {
		t.Fatalf("events: %d, fourth %v %q", len(events), events[3].Kind, events[3].Head)
	}
}

func TestDropResponseAfterTheServerActed(t *testing.T) {
	t.Parallel()
	srv, n := server(t)
	p := newProxy(t, srv.URL, faultproxy.Faults{DropResponse: 1}, nil)
	c := client(t)
	for i := range 10 {
		if got, err := post(c, fmt.Sprintf("http://%s/a%d", p.Addr(), i)); err == nil {
			t.Fatalf("request %d got an answer %q", i, got)
		}
	}
	if n.Load() != 10 {
		t.Fatalf("server saw %d requests, want 10 (each processed, each answer lost)", n.Load())
	}
	if s := p.Stats(); s.DroppedResponses != 10 {
		t.Fatalf("stats %+v", s)
	}
}

func TestMixedFaultsAreCountedExactly(t *testing.T) {
	t.Parallel()
	srv, n := server(t)
	var reqDrops, respDrops atomic.Int64
	p := newProxy(t, srv.URL, faultproxy.Faults{DropRequest: 0.2, DropResponse: 0.2, Delay: 0.3, MaxDelay: 5 * time.Millisecond}, func(ev faultproxy.Event) {
		switch ev.Kind {
		case faultproxy.KindDropRequest:
			reqDrops.Add(1)
		case faultproxy.KindDropResponse:
			respDrops.Add(1)
		}
	})
	c := client(t)
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 40 {
				if _, err := post(c, fmt.Sprintf("http://%s/m%d-%d", p.Addr(), w, i)); err != nil {
					failed.Add(1)
				} else {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	s := p.Stats()
	// Every request either went through, or was dropped on its way in or on its way out.
	if ok.Load()+failed.Load() != 320 || failed.Load() != s.DroppedRequests+s.DroppedResponses {
		t.Fatalf("ok %d failed %d, stats %+v", ok.Load(), failed.Load(), s)
	}
	// The server saw exactly the requests not dropped on the way in.
	if n.Load() != 320-s.DroppedRequests || reqDrops.Load() != s.DroppedRequests || respDrops.Load() != s.DroppedResponses {
		t.Fatalf("server %d, stats %+v, events %d/%d", n.Load(), s, reqDrops.Load(), respDrops.Load())
	}
	if s.DroppedRequests == 0 || s.DroppedResponses == 0 || s.Delays == 0 {
		t.Fatalf("some fault never fired: %+v", s)
	}
}

func TestCutAllAndSetFaults(t *testing.T) {
	t.Parallel()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		_, _ = io.WriteString(w, "late")
	}))
	defer slow.Close()
	p := newProxy(t, slow.URL, faultproxy.Faults{}, nil)
	c := client(t)
	errc := make(chan error, 1)
	go func() { _, err := post(c, "http://"+p.Addr()+"/"); errc <- err }()
	deadline := time.Now().Add(2 * time.Second)
	for p.Stats().Exchanges == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if cut := p.CutAll(); cut != 1 {
		t.Fatalf("CutAll closed %d connections, want 1", cut)
	}
	if err := <-errc; err == nil {
		t.Fatal("the cut request got an answer")
	}
	if err := p.SetFaults(faultproxy.Faults{DropRequest: 2}); err == nil || !strings.Contains(err.Error(), "Faults.DropRequest") {
		t.Fatalf("bad probability accepted: %v", err)
	}
	if got, err := post(c, "http://"+p.Addr()+"/"); err != nil || got != "late" {
		t.Fatalf("after the cut: %q %v", got, err)
	}
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opt  faultproxy.Options
		want string
	}{
		{faultproxy.Options{}, "Options.Target"},
		{faultproxy.Options{Target: "nohost"}, "Options.Target"},
		{faultproxy.Options{Target: "127.0.0.1:1", Faults: faultproxy.Faults{Delay: -0.1}}, "Faults.Delay"},
		{faultproxy.Options{Target: "127.0.0.1:1", Faults: faultproxy.Faults{DropRequest: 0.6, DropResponse: 0.6}}, "Faults.DropRequest + Faults.DropResponse"},
		{faultproxy.Options{Target: "127.0.0.1:1", Faults: faultproxy.Faults{MaxDelay: -1}}, "Faults.MaxDelay"},
		{faultproxy.Options{Target: "127.0.0.1:1", DialTimeout: -1}, "Options.DialTimeout"},
	} {
		p, err := faultproxy.New(tc.opt)
		if err == nil {
			p.Close()
			t.Errorf("%+v: accepted", tc.opt)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %q does not name %s", tc.opt, err, tc.want)
		}
	}
	p := newProxy(t, "127.0.0.1:1", faultproxy.Faults{}, nil)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil && !errors.Is(err, faultproxy.ErrClosed) {
		t.Fatal(err)
	}
}
