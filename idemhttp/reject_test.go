package idemhttp_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// TestRejections: every request the middleware refuses before the claim gets its problem, its
// own outcome, nothing run and nothing held.
func TestRejections(t *testing.T) {
	t.Parallel()
	badFP := func(*http.Request, []byte) (string, error) { return "", errors.New("not a charge") }
	invalidFP := func(*http.Request, []byte) (string, error) { return "short", nil }
	noScope := func(*http.Request) (string, error) { return "", errors.New("no caller") }
	for _, tc := range []struct {
		name    string
		opt     idemhttp.Options
		key     string
		body    string
		cut     bool // declare more body than is sent, then stop sending
		status  int
		problem string
		outcome idemhttp.Outcome
	}{
		{"invalid key", idemhttp.Options{Scope: idemhttp.SingleCaller()}, `"unterminated`, "{}", false, 400, idemhttp.ProblemInvalidKey, idemhttp.OutcomeInvalidKey},
		{"invalid key in the body", idemhttp.Options{Key: idemhttp.JSONKey("id"), Scope: idemhttp.SingleCaller()}, "", `{"id":"` + strings.Repeat("k", 300) + `"}`, false, 400, idemhttp.ProblemInvalidKey, idemhttp.OutcomeInvalidKey},
		{"missing key", idemhttp.Options{RequireKey: true, Scope: idemhttp.SingleCaller()}, "", "{}", false, 400, idemhttp.ProblemMissingKey, idemhttp.OutcomeMissingKey},
		{"missing key in the body", idemhttp.Options{RequireKey: true, Key: idemhttp.JSONKey("id"), Scope: idemhttp.SingleCaller()}, "", "{}", false, 400, idemhttp.ProblemMissingKey, idemhttp.OutcomeMissingKey},
		{"no scope", idemhttp.Options{Scope: noScope}, "k", "{}", false, 400, idemhttp.ProblemInvalidScope, idemhttp.OutcomeInvalidScope},
		{"body cut short", idemhttp.Options{Scope: idemhttp.SingleCaller()}, "k", "{}", true, 400, idemhttp.ProblemInvalidBody, idemhttp.OutcomeInvalidBody},
		{"fingerprint refused", idemhttp.Options{Fingerprint: badFP, Scope: idemhttp.SingleCaller()}, "k", "{}", false, 400, idemhttp.ProblemInvalidBody, idemhttp.OutcomeInvalidBody},
		{"invalid fingerprint", idemhttp.Options{Fingerprint: invalidFP, Scope: idemhttp.SingleCaller()}, "k", "{}", false, 500, idemhttp.ProblemInternal, idemhttp.OutcomeError},
		{"too large", idemhttp.Options{MaxRequestBody: 4, Scope: idemhttp.SingleCaller()}, "k", "{\"a\":1}", false, 413, idemhttp.ProblemRequestTooLarge, idemhttp.OutcomeTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var ran atomic.Int64
			b := setupBudget(t, tc.opt, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Add(1) }))
			var r reply
			if tc.cut {
				r = b.cutBody(t, tc.key, tc.body)
			} else {
				r = b.do("POST", "/", tc.key, tc.body)
			}
			if r.Status != tc.status {
				t.Fatalf("%d %s, want %d", r.Status, r.Body, tc.status)
			}
			if pt := problemType(t, r); pt != tc.problem {
				t.Fatalf("problem %s, want %s", pt, tc.problem)
			}
			if outs := b.outcomes(); len(outs) != 1 || outs[0] != tc.outcome {
				t.Fatalf("outcomes %v, want [%s]", outs, tc.outcome)
			}
			if n := ran.Load(); n != 0 {
				t.Fatalf("the handler ran %d times", n)
			}
			b.waitHeld(t, "the refused request's memory to come back", func(n int64) bool { return n == 0 })
		})
	}
}

// cutBody sends a request that declares more body than it sends, stops sending, and reads the
// answer.
func (b *budgetBundle) cutBody(t *testing.T, key, body string) reply {
	t.Helper()
	c, err := net.Dial("tcp", b.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := "POST / HTTP/1.1\r\nHost: t\r\nIdempotency-Key: " + key + "\r\nContent-Length: 100\r\n\r\n"
	if _, err := c.Write([]byte(head + body)); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: data, Err: err}
}

// TestOuterMaxBytesIsTooLarge: a body cut off by a limit outside the middleware
// (http.MaxBytesHandler in front of it, smaller than Options.MaxRequestBody) is answered 413
// (ProblemRequestTooLarge, OutcomeTooLarge), as one over the middleware's own limit is, not
// 400 as a body that broke off; the handler does not run.
func TestOuterMaxBytesIsTooLarge(t *testing.T) {
	t.Parallel()
	eng, err := idem.New(memstore.New(), idem.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	var outcome atomic.Value
	mw, err := idemhttp.New(idemhttp.Options{Runner: eng, Logger: quiet, OnEvent: func(ev idemhttp.Event) { outcome.Store(ev.Outcome) }, Scope: idemhttp.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Add(1) }))
	srv := httptest.NewServer(http.MaxBytesHandler(h, 100))
	defer srv.Close()
	// No Content-Length (chunked), so only the outer reader finds the body too large.
	req, _ := http.NewRequest("POST", srv.URL, io.MultiReader(strings.NewReader(strings.Repeat("x", 1000))))
	req.Header.Set("Idempotency-Key", "outer-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), idemhttp.ProblemRequestTooLarge) {
		t.Fatalf("a body over an outer limit: %d %s, want 413 %s", resp.StatusCode, body, idemhttp.ProblemRequestTooLarge)
	}
	if got := outcome.Load(); got != idemhttp.OutcomeTooLarge {
		t.Fatalf("outcome %v, want %s", got, idemhttp.OutcomeTooLarge)
	}
	if ran.Load() != 0 {
		t.Fatal("the handler ran for a body that was too large")
	}
}
