package gateway

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/store/memstore"
)

// TestMemoryBudgetSharedByRoutes checks that --memory-budget bounds the buffers of all routes
// together: a body held on one route takes room from a request on another.
func TestMemoryBudgetSharedByRoutes(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
	}))
	defer up.Close()
	st := memstore.New()
	g, err := New(context.Background(), Config{
		Upstream: up.URL, Scope: ScopeNone, MaxBody: 1 << 20, MemoryBudget: 64 << 10,
		Routes: []Route{{Method: "POST", Path: "/a"}, {Method: "POST", Path: "/b"}},
	}, Options{Store: st, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g)
	defer srv.Close()

	// Hold about 48 KiB of a body on /a: its buffer has grown to 64 KiB, the whole budget.
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := "POST /a HTTP/1.1\r\nHost: g\r\nIdempotency-Key: held\r\nContent-Length: " + strconv.Itoa(1<<20) + "\r\n\r\n"
	if _, err := c.Write([]byte(head + strings.Repeat("x", 48<<10))); err != nil {
		t.Fatal(err)
	}
	// Wait until the held body is charged to the gateway's one budget.
	for deadline := time.Now().Add(20 * time.Second); g.budget.InUse() < 48<<10; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the held body never reached the budget: %d bytes in use", g.budget.InUse())
		}
	}
	// A request on /b needs room the held one took: refused with 503 while it is held.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest("POST", srv.URL+"/b", strings.NewReader(strings.Repeat("y", 32<<10)))
		req.Header.Set("Idempotency-Key", "other-"+strconv.FormatInt(time.Now().UnixNano(), 10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a request on /b got %d while /a held the whole budget: each route has a budget of its own", resp.StatusCode)
		}
	}
	// Once the held request ends, /b is served again.
	c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest("POST", srv.URL+"/b", strings.NewReader(strings.Repeat("y", 32<<10)))
		req.Header.Set("Idempotency-Key", "after-"+strconv.FormatInt(time.Now().UnixNano(), 10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 201 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/b still answers %d after the held request ended", resp.StatusCode)
		}
	}
}
