package idemhttp_test

import (
	"context"
	"errors"
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

// Runner is required; the error names the field.
func TestOptionsRunnerValidation(t *testing.T) {
	t.Parallel()
	eng, _ := idem.New(memstore.New(), idem.Options{})
	for _, tc := range []struct {
		opt  idemhttp.Options
		want string
	}{
		{idemhttp.Options{Scope: idemhttp.SingleCaller()}, "Options.Runner"},
		{idemhttp.Options{Runner: (*idem.Engine)(nil), Scope: idemhttp.SingleCaller()}, "Options.Runner"},
	} {
		_, err := idemhttp.New(tc.opt)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %s", tc.opt, err, tc.want)
		}
	}
	if _, err := idemhttp.New(idemhttp.Options{Runner: eng, Scope: idemhttp.SingleCaller()}); err != nil {
		t.Fatalf("an engine as Runner: %v", err)
	}
}

// plainRunner is a Runner that reports zero Options; fail, if set, makes every execution's
// outcome unknown, as a failed commit does (Executed false and a store error).
type plainRunner struct {
	eng  *idem.Engine
	fail bool
}

func (p plainRunner) Run(ctx context.Context, call idem.Call, fn idem.Func) (idem.Result, error) {
	res, err := p.eng.Run(ctx, call, fn)
	if p.fail && res.Executed {
		return idem.Result{}, &idem.StoreError{Op: "commit", Err: errors.New("connection lost")}
	}
	return res, err
}

func (p plainRunner) Options() idem.Options { return idem.Options{} }

func runnerServer(t *testing.T, r idem.Runner, failOpen bool) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	mw, err := idemhttp.New(idemhttp.Options{Runner: r, Logger: quiet, FailOpen: failOpen, ExpiresHeader: true, Scope: idemhttp.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	runs := new(atomic.Int32)
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "done")
	})))
	t.Cleanup(srv.Close)
	return srv, runs
}

func postKey(t *testing.T, srv *httptest.Server, key string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// A Runner whose Options are zero runs and replays with the default policy.
func TestRunnerZeroOptions(t *testing.T) {
	t.Parallel()
	eng, _ := idem.New(memstore.New(), idem.Options{Logger: quiet})
	srv, runs := runnerServer(t, plainRunner{eng: eng}, false)
	r1, r2 := postKey(t, srv, "k"), postKey(t, srv, "k")
	if r1.StatusCode != http.StatusCreated || r2.StatusCode != http.StatusCreated || r2.Header.Get(idemhttp.ReplayedHeader) != "true" || runs.Load() != 1 {
		t.Fatalf("got %d then %d (replayed %q), %d runs; want 201, its replay, 1 run", r1.StatusCode, r2.StatusCode, r2.Header.Get(idemhttp.ReplayedHeader), runs.Load())
	}
}

// A Runner that ran the handler but reports nothing of it stands (Executed false, an error):
// the client gets 503, not the handler's answer, and never a fail-open second run.
func TestRunnerNotExecutedAfterHandler(t *testing.T) {
	t.Parallel()
	eng, _ := idem.New(memstore.New(), idem.Options{Logger: quiet})
	srv, runs := runnerServer(t, plainRunner{eng: eng, fail: true}, true)
	if r := postKey(t, srv, "k"); r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || runs.Load() != 1 {
		t.Fatalf("got %d (Retry-After %q) after %d runs; want 503 with Retry-After after 1 run", r.StatusCode, r.Header.Get("Retry-After"), runs.Load())
	}
}
