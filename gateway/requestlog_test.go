package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/syncbuf"
	"github.com/idemkit/idem/store/memstore"
)

// TestRequestLog: each processed request is logged once, at info, or at warn when its
// upstream call failed; a request that passes through (a GET) is counted, not logged.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/v1/down" {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close() // no answer
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	var log syncbuf.Buffer
	g, err := New(context.Background(), Config{Upstream: up.URL, Scope: ScopeNone},
		Options{Store: memstore.New(), Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	for _, rq := range []struct{ method, path string }{{"POST", "/v1/charges"}, {"POST", "/v1/down"}, {"GET", "/v1/charges"}} {
		r := httptest.NewRequest(rq.method, rq.path, strings.NewReader(`{}`))
		r.Header.Set("Idempotency-Key", "k"+rq.path)
		g.ServeHTTP(httptest.NewRecorder(), r)
	}
	var got []string
	for line := range strings.Lines(log.String()) {
		var e struct{ Level, Msg, Method, Path, Outcome string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if e.Msg == "request" {
			got = append(got, e.Level+" "+e.Method+" "+e.Path+" "+e.Outcome)
		}
	}
	if want := "[INFO POST /v1/charges executed WARN POST /v1/down upstream_error]"; fmt.Sprint(got) != want {
		t.Fatalf("request log lines %v, want %s", got, want)
	}
}
