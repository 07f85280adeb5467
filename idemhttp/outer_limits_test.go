package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

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

// TestMarkUncertainEventOutcome: a handler that calls MarkUncertain is reported to OnEvent as
// OutcomeUncertain (the claim is held), not as executed, whatever status it answered.
func TestMarkUncertainEventOutcome(t *testing.T) {
	t.Parallel()
	for _, status := range []int{201, 502} {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			idemhttp.MarkUncertain(w)
			w.WriteHeader(status)
		})
		b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, h)
		b.do("POST", "/", "unc-1", "x")
		if got := fmt.Sprint(b.outcomes()); got != "[uncertain]" {
			t.Errorf("status %d with MarkUncertain: events %s, want [uncertain]", status, got)
		}
	}
}
