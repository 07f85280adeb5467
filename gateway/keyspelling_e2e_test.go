package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A client sends the key as Idempotency_Key, which an upstream that follows CGI's naming (PHP,
// WSGI, Rack behind nginx) reads as Idempotency-Key: the gateway, which sees no key under that
// name, would forward the request unkeyed on a route where the key is optional, and the
// upstream would take it for one the gateway made safe to retry; its retries would all run.
// Through the binary, the request is refused with 400 and never reaches the upstream.
func TestBinaryKeyHeaderSpellingRefused(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(201)
	}))
	t.Cleanup(up.Close)
	g := startGateway(t, "--upstream", up.URL, "--store", sqliteStore(t))
	c := &http.Client{Timeout: 10 * time.Second}
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, g.url+"/v1/charges", strings.NewReader(charge))
		req.Header.Set("Content-Type", "application/json")
		req.Header["Idempotency_Key"] = []string{"order-7"}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("Idempotency_Key: %d, want 400", resp.StatusCode)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("the upstream got %d requests keyed under another spelling", n)
	}
}
