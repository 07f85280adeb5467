package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/gateway"
)

// FuzzGatewayRequest feeds random request bytes to an in-process gateway (memory store, a
// loopback upstream, a required route and a scope header): every request net/http would
// accept is served without a panic and answered with a valid status; a problem answer is
// JSON; a request the gateway refuses (4xx) never reaches the upstream.
func FuzzGatewayRequest(f *testing.F) {
	for _, s := range []string{
		"POST /v1/charges HTTP/1.1\r\nHost: h\r\nIdempotency-Key: k1\r\nContent-Length: 2\r\n\r\n{}",
		"POST //v1/payments/ HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}",
		"POST /v1/payments%2F HTTP/1.1\r\nHost: h\r\nIdempotency-Key: k\r\nContent-Length: 0\r\n\r\n",
		"post /v1/charges HTTP/1.1\r\nHost: h\r\nIdempotency-Key: k\r\n\r\n",
		"POST /v1/charges HTTP/1.1\r\nHost: h\r\nIdempotency-Key: k\r\nX-API-Key: a\r\nX-API-Key: b\r\nContent-Length: 0\r\n\r\n",
		"POST /v1/charges HTTP/1.1\r\nHost: h\r\nIdempotency-Key: k\r\nConnection: X-API-Key\r\n\r\n",
		"POST /v1/charges HTTP/1.1\r\nHost: h\r\nIdempotency-Key: k\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: 1\r\n\r\n",
		"PATCH /v1;x/./payments/../payments HTTP/1.0\r\nIdempotency-Key: \"q\"\r\nContent-Length: 3\r\n\r\n{a}",
		"GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
		"POST http://other/v1/charges HTTP/1.1\r\nHost: h\r\nIdempotency-Key: " + strings.Repeat("k", 300) + "\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	var calls atomic.Int64 // the upstream answers 201 only: a 4xx comes from the gateway
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	f.Cleanup(up.Close)
	g, err := gateway.New(context.Background(), gateway.Config{
		Upstream: up.URL, Store: "memory://", ScopeHeader: "X-API-Key", ScopeSecret: "0123456789abcdef",
		MaxBody: 4096, Routes: []gateway.Route{{Method: "POST", Path: "/v1/payments", Mode: "required"}},
	}, gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { g.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return // net/http's server answers 400 itself
		}
		r.RemoteAddr = "127.0.0.1:1"
		w := httptest.NewRecorder()
		before := calls.Load()
		g.ServeHTTP(w, r)
		res := w.Result()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode < 100 || res.StatusCode > 599 {
			t.Fatalf("status %d", res.StatusCode)
		}
		if res.StatusCode >= 400 && res.StatusCode < 500 && calls.Load() != before {
			t.Fatalf("refused with %d, yet the upstream was called: %q", res.StatusCode, body)
		}
		if strings.Contains(res.Header.Get("Content-Type"), "problem+json") {
			var p struct {
				Type   string `json:"type"`
				Status int    `json:"status"`
			}
			if err := json.Unmarshal(body, &p); err != nil || p.Type == "" || p.Status != res.StatusCode {
				t.Fatalf("problem body %q (status %d): %v", body, res.StatusCode, err)
			}
		}
	})
}
