package idemclient_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// ledger is the API behind the middleware: it charges each operation it is asked to, and
// counts how many times each one was charged.
type ledger struct {
	mu      sync.Mutex
	charges map[string]int
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct{ Op string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Op == "" {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	l.charges[in.Op]++
	l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"charged":%q}`, in.Op)
}

// faultProxy forwards to backend and, at random, drops the connection before forwarding or,
// worse, after the backend processed the request (the response is lost).
type faultProxy struct {
	backend                     string
	rng                         *rand.Rand
	mu                          sync.Mutex
	dropBefore, dropAfter       float64
	droppedBefore, droppedAfter atomic.Int32
	client                      *http.Client
}

func (p *faultProxy) roll() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.Float64()
}

func (p *faultProxy) drop(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := p.roll()
	if x < p.dropBefore {
		p.droppedBefore.Add(1)
		p.drop(w)
		return
	}
	out, _ := http.NewRequestWithContext(r.Context(), r.Method, p.backend+r.URL.Path, r.Body)
	out.Header = r.Header.Clone()
	resp, err := p.client.Do(out)
	if err != nil {
		p.drop(w)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if x < p.dropBefore+p.dropAfter {
		p.droppedAfter.Add(1)
		p.drop(w) // the server acted; the client never hears of it
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// 1,000 payments through a network that loses requests and responses: every payment the client
// reports successful was charged exactly once, and none was charged twice.
func TestPaymentsThroughLossyNetwork(t *testing.T) {
	t.Parallel()
	l := &ledger{charges: map[string]int{}}
	eng, err := idem.New(memstore.New(), idem.Options{Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.New(idemhttp.Options{Runner: eng, RequireKey: true, Scope: idemhttp.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(mw(l))
	defer api.Close()
	fp := &faultProxy{backend: api.URL, rng: rand.New(rand.NewPCG(1, 2)), dropBefore: 0.15, dropAfter: 0.25,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	front := httptest.NewServer(fp)
	defer front.Close()

	client, err := idemclient.NewClient(idemclient.Options{MaxAttempts: 12, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxElapsed: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const ops, workers = 1000, 16
	var succeeded sync.Map
	var failed atomic.Int32
	work := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range work {
				op := fmt.Sprintf("op-%04d", i)
				resp, err := client.Post(front.URL+"/pay", "application/json", strings.NewReader(`{"op":"`+op+`"}`))
				if err != nil {
					failed.Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated || string(b) != `{"charged":"`+op+`"}` {
					t.Errorf("%s: %d %s", op, resp.StatusCode, b)
					continue
				}
				succeeded.Store(op, true)
			}
		})
	}
	for i := range ops {
		work <- i
	}
	close(work)
	wg.Wait()

	doubles, lost, ok := 0, 0, 0
	l.mu.Lock()
	for op, n := range l.charges {
		if n > 1 {
			doubles++
			t.Errorf("%s charged %d times", op, n)
		}
	}
	succeeded.Range(func(k, _ any) bool {
		ok++
		if l.charges[k.(string)] != 1 {
			lost++
			t.Errorf("%s reported successful but charged %d times", k, l.charges[k.(string)])
		}
		return true
	})
	l.mu.Unlock()
	t.Logf("%d operations: %d succeeded, %d gave up; %d requests dropped before the server, %d responses dropped after it acted; %d double charges, %d lost",
		ops, ok, failed.Load(), fp.droppedBefore.Load(), fp.droppedAfter.Load(), doubles, lost)
	if fp.droppedAfter.Load() < 100 {
		t.Fatalf("only %d responses dropped: the test did not exercise lost responses", fp.droppedAfter.Load())
	}
	if ok+int(failed.Load()) != ops || failed.Load() > 5 {
		t.Fatalf("%d of %d operations gave up", failed.Load(), ops)
	}
}

// The same network without the middleware double-charges: the test above would notice.
func TestLossyNetworkWithoutIdemDoubleCharges(t *testing.T) {
	t.Parallel()
	l := &ledger{charges: map[string]int{}}
	api := httptest.NewServer(l)
	defer api.Close()
	fp := &faultProxy{backend: api.URL, rng: rand.New(rand.NewPCG(3, 4)), dropAfter: 0.3, client: &http.Client{}}
	front := httptest.NewServer(fp)
	defer front.Close()
	client, _ := idemclient.NewClient(idemclient.Options{MaxAttempts: 12, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond})
	for i := range 100 {
		resp, err := client.Post(front.URL+"/pay", "application/json", strings.NewReader(fmt.Sprintf(`{"op":"op-%d"}`, i)))
		if err == nil {
			resp.Body.Close()
		}
	}
	doubles := 0
	for _, n := range l.charges {
		if n > 1 {
			doubles++
		}
	}
	if doubles == 0 {
		t.Fatal("no double charge without idem: the lossy network does not bite")
	}
}
