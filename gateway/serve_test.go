package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
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

// TestHostName: the host a fingerprint names is the Host header's name alone: without its
// port, IPv6 brackets or trailing dot, in lower case.
func TestHostName(t *testing.T) {
	for in, want := range map[string]string{
		"api.test":       "api.test",
		"API.Test:8443":  "api.test",
		"api.test.":      "api.test",
		"api.test.:80":   "api.test",
		"[::1]:8080":     "::1",
		"[::1]":          "::1",
		"127.0.0.1:9000": "127.0.0.1",
		"":               "",
	} {
		if got := hostName(in); got != want {
			t.Errorf("hostName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHTTP2Preface: the HTTP/2 connection preface (PRI over HTTP/2 framing, as a server
// without h2c sees it) is refused with 505; an HTTP/2 request of any other method is served,
// and so is a PRI request over HTTP/1.1, an unknown method passed through.
func TestHTTP2Preface(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	g, err := New(context.Background(), Config{Upstream: up.URL, Scope: ScopeNone},
		Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	for _, tc := range []struct {
		method string
		major  int
		want   int
	}{{"PRI", 2, 505}, {"POST", 2, 201}, {"PRI", 1, 201}} {
		r := httptest.NewRequest(tc.method, "/v1/charges", strings.NewReader(`{}`))
		r.ProtoMajor, r.ProtoMinor = tc.major, 0
		r.Header.Set("Idempotency-Key", fmt.Sprint("h2-", tc.method, tc.major))
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s over HTTP/%d: %d %s, want %d", tc.method, tc.major, w.Code, w.Body, tc.want)
		}
	}
}

// downStore is a store whose every Get fails as a store that does not answer.
type downStore struct{ idem.Store }

func (downStore) Get(context.Context, string) (idem.Record, error) {
	return idem.Record{}, errors.New("connection refused")
}

// TestReadyWithStoreDown: a gateway whose store does not answer is not ready (/readyz 503
// "store unavailable"), so a load balancer sends its traffic elsewhere; a store that answers
// "not found" for the probe key is.
func TestReadyWithStoreDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		st     idem.Store
		status int
		body   string
	}{{memstore.New(), 200, "ok\n"}, {downStore{memstore.New()}, 503, "store unavailable\n"}} {
		g, err := New(context.Background(), Config{Upstream: "http://127.0.0.1:1", Scope: ScopeNone},
			Options{Store: tc.st, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		for name, h := range map[string]http.Handler{"gateway": g, "ops": g.OpsHandler()} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
			if w.Code != tc.status || w.Body.String() != tc.body {
				t.Errorf("%T, %s /readyz: %d %q, want %d %q", tc.st, name, w.Code, w.Body, tc.status, tc.body)
			}
		}
		g.Close()
	}
}
