package targets

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines, except Fiber's and fasthttp's process-lifetime ones:
// the idempotency middleware's in-memory storage GC has no Close, and the date and timestamp
// updaters and the worker pool cleaner run until the process ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/internal/storage/memory.(*Storage).gc"),
		goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/utils.StartTimeStampUpdater.func1.1"),
		goleak.IgnoreAnyFunction("github.com/gofiber/fiber/v2/internal/storage/memory.New.StartTimeStampUpdater.func1.1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	)
}

func post(t *testing.T, u, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

const key36 = "0123456789ab-00000000000000000000001"

// Fiber's middleware, as configured, runs the handler once for two requests with one key and
// replays the answer; bare Fiber runs it twice.
func TestFiberApp(t *testing.T) {
	t.Parallel()
	for _, withIdem := range []bool{false, true} {
		var runs atomic.Int64
		app := fiberApp(withIdem, func() { runs.Add(1) })
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- app.Listener(ln) }()
		u := "http://" + ln.Addr().String() + "/v1/charges"
		r1, b1 := post(t, u, key36, `{"amount":1}`)
		r2, b2 := post(t, u, key36, `{"amount":1}`)
		if r1.StatusCode != 201 || r2.StatusCode != 201 || b1 != string(Body) || b2 != string(Body) {
			t.Errorf("idempotency %v: answers %d %q, %d %q", withIdem, r1.StatusCode, b1, r2.StatusCode, b2)
		}
		if want := map[bool]int64{false: 2, true: 1}[withIdem]; runs.Load() != want {
			t.Errorf("idempotency %v: handler ran %d times, want %d", withIdem, runs.Load(), want)
		}
		if err := app.ShutdownWithTimeout(5 * time.Second); err != nil {
			t.Error(err)
		}
		<-done
	}
}

// The bare proxy forwards to the upstream, which counts what it held.
func TestBareProxyAndUpstream(t *testing.T) {
	t.Parallel()
	up := &Upstream{Delay: 20 * time.Millisecond}
	us := httptest.NewServer(up)
	defer us.Close()
	u, _ := url.Parse(us.URL)
	px := httptest.NewServer(BareProxy(u))
	defer px.Close()
	const n = 20
	errs := make(chan string, n)
	for range n {
		go func() {
			resp, body := post(t, px.URL+"/v1/charges", "", `{}`)
			if resp.StatusCode != 201 || body != string(Body) || resp.Header.Get("Content-Type") != "application/json" {
				errs <- resp.Status + " " + body
				return
			}
			errs <- ""
		}()
	}
	for range n {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
	resp, err := http.Get(us.URL + StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.Requests != n || st.MaxInFlight < 2 || st.MaxInFlight > n {
		t.Errorf("stats %+v, want %d requests, several at once", st, n)
	}
	px.CloseClientConnections()
	us.CloseClientConnections()
}

// idemhttp's target replays with the header, runs the bare handler once per key.
func TestIdemHandler(t *testing.T) {
	t.Parallel()
	h, err := IdemHandler(16)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	r1, _ := post(t, srv.URL+"/v1/charges", key36, `{"amount":1}`)
	r2, _ := post(t, srv.URL+"/v1/charges", key36, `{"amount":1}`)
	r3, _ := post(t, srv.URL+"/v1/charges", key36, `{"amount":2}`)
	if r1.StatusCode != 201 || r2.Header.Get("Idempotent-Replayed") != "true" || r3.StatusCode != 422 {
		t.Errorf("answers %d, replayed %q, mismatch %d", r1.StatusCode, r2.Header.Get("Idempotent-Replayed"), r3.StatusCode)
	}
}
