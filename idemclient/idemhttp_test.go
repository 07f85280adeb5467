package idemclient_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// slowAPI is a handler whose each call takes delay and is counted.
type slowAPI struct {
	delay   time.Duration
	calls   atomic.Int32
	started chan struct{}
}

func (a *slowAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.ReadAll(r.Body)
	n := a.calls.Add(1)
	select {
	case a.started <- struct{}{}:
	default:
	}
	time.Sleep(a.delay)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"charge":%d,"pad":%q}`, n, strings.Repeat("x", 512))
}

// protected serves api behind idemhttp, through fault (which may wrap the middleware).
func protected(t *testing.T, api http.Handler, fault func(next http.Handler) http.Handler) string {
	t.Helper()
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.New(idemhttp.Options{Runner: eng, RequireKey: true, Scope: idemhttp.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(api)
	if fault != nil {
		h = fault(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func postKey(c *http.Client, url, key string) (status int, body string, replayed bool, err error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":1}`))
	req.Header.Set(idem.KeyHeader, key)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true", err
}

// Against idemhttp: a duplicate in flight, attempt timeouts on a slow handler, an answer lost
// after the handler ran and an answer cut mid-body. One effect each, the stored answer in the
// end, and no give-up while the budget allows a useful attempt.
func TestAgainstIdemhttp(t *testing.T) {
	t.Parallel()
	const op = 800 * time.Millisecond
	newClient := func(t *testing.T, opt idemclient.Options) *http.Client {
		opt.BaseDelay = 10 * time.Millisecond
		opt.MaxElapsed = 6 * time.Second
		c, err := idemclient.NewClient(opt)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("duplicate in flight", func(t *testing.T) {
		t.Parallel()
		api := &slowAPI{delay: op, started: make(chan struct{}, 1)}
		url := protected(t, api, nil)
		type answer struct {
			body string
			err  error
		}
		first := make(chan answer, 1)
		go func() {
			_, b, _, err := postKey(http.DefaultClient, url, "dup")
			first <- answer{b, err}
		}()
		<-api.started
		var retryAfter []string
		c := newClient(t, idemclient.Options{OnEvent: func(e idemclient.Event) {
			if e.Kind == idemclient.EventRetry {
				retryAfter = append(retryAfter, e.Delay.String())
			}
		}})
		start := time.Now()
		status, body, replayed, err := postKey(c, url, "dup")
		took := time.Since(start)
		o := <-first
		if err != nil || o.err != nil || status != http.StatusCreated || body != o.body || !replayed {
			t.Fatalf("duplicate %d %q replayed=%v err %v; original %q %v", status, body, replayed, err, o.body, o.err)
		}
		if n := api.calls.Load(); n != 1 {
			t.Fatalf("%d effects", n)
		}
		// The 409 says Retry-After 1 (the operation's age rounded up): the answer comes at the
		// first retry, a second after the duplicate was sent, with a second of margin.
		if took > op+2*time.Second {
			t.Errorf("answer after %v (pauses %v)", took, retryAfter)
		}
	})

	t.Run("attempt timeout", func(t *testing.T) {
		t.Parallel()
		api := &slowAPI{delay: op}
		url := protected(t, api, nil)
		var timeouts atomic.Int32
		c := newClient(t, idemclient.Options{AttemptTimeout: 200 * time.Millisecond, OnEvent: func(e idemclient.Event) {
			if e.Kind == idemclient.EventAttempt && errors.Is(e.Err, idemclient.ErrAttemptTimeout) {
				timeouts.Add(1)
			}
		}})
		start := time.Now()
		status, body, _, err := postKey(c, url, "slow")
		if err != nil || status != http.StatusCreated || !strings.HasPrefix(body, `{"charge":1,`) {
			t.Fatalf("%d %q %v", status, body, err)
		}
		if n := api.calls.Load(); n != 1 || timeouts.Load() == 0 {
			t.Fatalf("%d effects, %d timed-out attempts", n, timeouts.Load())
		}
		if took := time.Since(start); took > 6*time.Second {
			t.Errorf("answer after %v", took)
		}
	})

	lossy := func(cut bool) func(http.Handler) http.Handler {
		var done atomic.Bool
		return func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if done.Swap(true) {
					next.ServeHTTP(w, r)
					return
				}
				rec := httptest.NewRecorder()
				next.ServeHTTP(rec, r) // the handler ran and its answer is stored
				if cut {
					w.Header().Set("Content-Length", strconv.Itoa(rec.Body.Len()))
					w.WriteHeader(rec.Code)
					_, _ = w.Write(rec.Body.Bytes()[:10])
					w.(http.Flusher).Flush()
				}
				panic(http.ErrAbortHandler) // the connection goes; the client never hears the rest
			})
		}
	}
	for _, cut := range []bool{false, true} {
		name := map[bool]string{false: "answer lost", true: "answer cut mid-body"}[cut]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := &slowAPI{}
			url := protected(t, api, lossy(cut))
			c := newClient(t, idemclient.Options{AttemptTimeout: 2 * time.Second})
			status, body, replayed, err := postKey(c, url, "lost")
			if err != nil || status != http.StatusCreated || !replayed || !strings.HasPrefix(body, `{"charge":1,`) {
				t.Fatalf("%d %q replayed=%v %v", status, body, replayed, err)
			}
			if n := api.calls.Load(); n != 1 {
				t.Fatalf("%d effects", n)
			}
		})
	}
}
