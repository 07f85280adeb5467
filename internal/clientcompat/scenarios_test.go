package clientcompat_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Timings of the scenarios. The upstream's charge takes opDelay; each client bounds one attempt
// by attemptTimeout and an intent by budget.
const (
	opDelay        = 1500 * time.Millisecond
	attemptTimeout = 600 * time.Millisecond
	budget         = 8 * time.Second
)

// client is one retrying client under test, set up as docs/clients.md shows.
type client struct {
	name string
	// post sends body as one intent with key to url+"/v1/charges" and reports the outcome.
	post func(t *testing.T, url, key, body string) result
	// maxPause is the longest pause the client takes on a Retry-After in these scenarios.
	maxPause time.Duration
	// cutRetried says whether the client itself retries an answer cut mid-body; when it does
	// not, the caller re-sends the intent with the same key.
	cutRetried bool
}

// withTenant adds the tenant header the gateway scopes keys by.
type withTenant struct{ base http.RoundTripper }

func (w withTenant) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(apiKey, "tenant-1")
	return w.base.RoundTrip(r)
}

func readResult(resp *http.Response, err error, start time.Time) result {
	if err != nil {
		return result{Err: err.Error(), Seconds: time.Since(start).Seconds()}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	r := result{Status: resp.StatusCode, Body: string(b), Replayed: resp.Header.Get("Idempotent-Replayed") == "true", Seconds: time.Since(start).Seconds()}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

func goClients() []client {
	return []client{
		{name: "idemclient", cutRetried: true, maxPause: budget - min(attemptTimeout, budget/2), post: func(t *testing.T, url, key, body string) result {
			c, err := newIdemClient(attemptTimeout, budget)
			if err != nil {
				t.Fatal(err)
			}
			c.Transport = withTenant{c.Transport}
			req, _ := http.NewRequest(http.MethodPost, url+"/v1/charges", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			start := time.Now()
			resp, err := c.Do(req)
			return readResult(resp, err, start)
		}},
		{name: "go-retryablehttp", maxPause: 2 * time.Second, post: func(t *testing.T, url, key, body string) result {
			c := newRetryableClient(attemptTimeout)
			c.Logger = nil
			c.HTTPClient.Transport = withTenant{c.HTTPClient.Transport}
			start := time.Now()
			resp, err := postIntent(c, url+"/v1/charges", key, []byte(body))
			return readResult(resp, err, start)
		}},
	}
}

// allClients is every client under test; those that need a missing program skip.
func allClients(t *testing.T) []client {
	return append(goClients(), otherClients(t)...)
}

// The four faults, for each client: one effect per intent, a faithful replay, no give-up while
// the budget allows a useful attempt, and the answer within a stated bound.
func TestClientsThroughGateway(t *testing.T) {
	t.Parallel()
	t.Cleanup(func() {
		var b strings.Builder
		inFlight.Range(func(k, v any) bool {
			d := v.([2]time.Duration)
			fmt.Fprintf(&b, "\n| %s | %.2f s | %.2f s |", k, d[0].Seconds(), d[1].Seconds())
			return true
		})
		t.Logf("a duplicate of a %v operation, sent as it starts:\n| client | waited | beyond the original |%s", opDelay, b.String())
	})
	for _, c := range allClients(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			t.Run("duplicate in flight", func(t *testing.T) { t.Parallel(); duplicateInFlight(t, c) })
			t.Run("attempt timeout", func(t *testing.T) { t.Parallel(); attemptTimedOut(t, c) })
			t.Run("answer lost", func(t *testing.T) { t.Parallel(); answerLost(t, c) })
			t.Run("answer cut mid-body", func(t *testing.T) { t.Parallel(); answerCut(t, c) })
			t.Run("mismatch is final", func(t *testing.T) { t.Parallel(); mismatchFinal(t, c) })
		})
	}
}

func charge(op string) string { return fmt.Sprintf(`{"op":%q}`, op) }

// inFlight records, per client, what a duplicate of a running operation cost it.
var inFlight sync.Map // client name → [its wait, its wait beyond the original's own end]

// A duplicate sent while the original runs gets 409 + Retry-After from the gateway, obeys it
// and gets the original's answer, replayed.
func duplicateInFlight(t *testing.T, c client) {
	b := setup(t, opDelay)
	key, body := "dup-"+c.name, charge("dup")
	// The original starts when the duplicate's first attempt arrives, so that a client
	// program's start-up does not count: a proxy in front of the gateway sends the original,
	// waits until it reaches the upstream, asks the gateway what a duplicate is told now (409
	// and a Retry-After; a 409 changes nothing), then forwards the duplicate.
	orig := make(chan result, 1)
	probed := make(chan result, 1)
	var once sync.Once
	target, _ := url.Parse(b.url)
	rp := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() {
			go func() {
				r, err := plainPost(b.url, key, body)
				if err != nil {
					r.Err = err.Error()
				}
				orig <- r
			}()
			select {
			case <-b.up.started:
			case <-time.After(10 * time.Second):
			}
			p, err := plainPost(b.url, key, body)
			if err != nil {
				p.Err = err.Error()
			}
			probed <- p
		})
		rp.ServeHTTP(w, r)
	}))
	defer front.Close()
	dup := c.post(t, front.URL, key, body)
	var probe result
	select {
	case probe = <-probed:
	default:
		t.Fatalf("the duplicate never reached the gateway: %+v", dup)
	}
	if probe.Err != "" || probe.Status != http.StatusConflict || probe.retryAfter <= 0 {
		t.Fatalf("probe: %+v", probe)
	}
	o := <-orig
	if dup.Err != "" || dup.Status != http.StatusCreated || dup.Body != o.Body || !dup.Replayed {
		t.Fatalf("duplicate got %+v; original %+v", dup, o)
	}
	if n := b.up.count("dup"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	// Bound: past the original's own answer, the duplicate waits at most one pause, then asks
	// again. The pause is the gateway's Retry-After — an estimate no longer than the operation's
	// age rounded up to a second, or the lease left, a figure the probe sees — or the client's
	// own cap on a pause if that is shorter; plus two seconds of margin for a loaded machine.
	estimate := max(probe.retryAfter, opDelay.Round(time.Second))
	// The original's answer exists opDelay after the duplicate's first arrival; the client's
	// own clock runs from just before that arrival.
	extra := dup.elapsed() - opDelay
	if bound := min(estimate, c.maxPause) + 2*time.Second; extra > bound {
		t.Errorf("the duplicate's answer came %v after the original's, want at most %v (Retry-After %v, the client's cap %v)",
			extra, bound, probe.retryAfter, c.maxPause)
	}
	t.Logf("%s: a duplicate of a %v operation waited %v for its answer, %v more than the original (first Retry-After %v)",
		c.name, opDelay, dup.elapsed().Round(10*time.Millisecond), extra.Round(10*time.Millisecond), probe.retryAfter)
	inFlight.Store(c.name, [2]time.Duration{dup.elapsed(), extra})
}

// Each attempt times out before the operation ends; the retries, with the same key, find it in
// flight, then completed.
func attemptTimedOut(t *testing.T, c client) {
	b := setup(t, opDelay)
	r := c.post(t, b.url, "slow-"+c.name, charge("slow"))
	if r.Err != "" || r.Status != http.StatusCreated || !strings.Contains(r.Body, `"op":"slow"`) {
		t.Fatalf("got %+v", r)
	}
	if n := b.up.count("slow"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if r.elapsed() > budget {
		t.Errorf("answer after %v, past the %v budget", r.elapsed(), budget)
	}
}

// The gateway acts, then the answer is lost on the way back: the retry gets the replay.
func answerLost(t *testing.T, c client) {
	b := setup(t, 50*time.Millisecond)
	url, dropped := dropFirstAnswer(t, b.url)
	r := c.post(t, url, "lost-"+c.name, charge("lost"))
	// At least the first: a client that sent another attempt while the first was out (a
	// 409 in flight) may lose that answer too, before the proxy stops dropping.
	if dropped() < 1 {
		t.Fatalf("%d answers dropped, want the first", dropped())
	}
	if r.Err != "" || r.Status != http.StatusCreated || !r.Replayed || !strings.Contains(r.Body, `"op":"lost"`) {
		t.Fatalf("got %+v", r)
	}
	if n := b.up.count("lost"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if r.elapsed() > 5*time.Second {
		t.Errorf("answer after %v", r.elapsed())
	}
}

// The answer is reset after its first body bytes. A client that reads the body within the
// attempt retries; with the others, the caller re-sends the intent with the same key. Either
// way the effect happened once and the final answer is the stored one.
func answerCut(t *testing.T, c client) {
	b := setup(t, 50*time.Millisecond)
	url, cuts := cutFirstAnswer(t, b.url)
	key := "cut-" + c.name
	r := c.post(t, url, key, charge("cut"))
	// On a loaded machine the client's attempt may time out before the gateway answers on the
	// first connection; the cut then happens after the client moved on, so wait for it.
	for deadline := time.Now().Add(10 * time.Second); cuts() != 1 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if cuts() != 1 {
		t.Fatalf("%d answers cut, want 1", cuts())
	}
	if c.cutRetried != (r.Err == "") {
		t.Fatalf("retried by the client: %v, want %v: %+v", r.Err == "", c.cutRetried, r)
	}
	if r.Err != "" {
		r = c.post(t, url, key, charge("cut"))
	}
	if r.Err != "" || r.Status != http.StatusCreated || !r.Replayed || !strings.Contains(r.Body, `"op":"cut"`) {
		t.Fatalf("got %+v", r)
	}
	if n := b.up.count("cut"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// The same key with another payload is 422, and no client retries it.
func mismatchFinal(t *testing.T, c client) {
	b := setup(t, 0)
	key := "mismatch-" + c.name
	if r, err := plainPost(b.url, key, charge("a")); err != nil || r.Status != http.StatusCreated {
		t.Fatalf("first: %+v %v", r, err)
	}
	// Count what reaches the gateway from the client.
	var seen atomic.Int32
	target, _ := url.Parse(b.url)
	rp := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		rp.ServeHTTP(w, r)
	}))
	defer front.Close()
	r := c.post(t, front.URL, key, charge("b"))
	if r.Status != http.StatusUnprocessableEntity || !strings.Contains(r.Body, `"status":422`) {
		t.Fatalf("got %+v", r)
	}
	if n := seen.Load(); n != 1 {
		t.Errorf("a 422 was sent %d times", n)
	}
	if b.up.count("b") != 0 || b.up.count("a") != 1 {
		t.Fatalf("effects a=%d b=%d", b.up.count("a"), b.up.count("b"))
	}
}
