package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/store/memstore"
)

// TestMemoryBudgetChargesTheDetachedBody: the gateway hands its proxy a detached copy of each
// request body (the Transport may read it after the handler returns), and the memory budget
// is charged for that copy as well as for the buffer the body was read into. A 900 kB POST
// then holds about 1.8 MB: under a 4 MiB budget, 2 such requests in flight at once, and the
// next ones are refused with 503 until they end (4 would be admitted if the copy went
// uncounted, twice the memory the budget allows).
func TestMemoryBudgetChargesTheDetachedBody(t *testing.T) {
	t.Parallel()
	var arrived atomic.Int32
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived.Add(1)
		<-release
		w.WriteHeader(201)
	}))
	defer up.Close()
	const budget, size = 4 << 20, 900_000
	g, err := New(context.Background(), Config{
		Upstream: up.URL, Scope: ScopeNone, MaxBody: 1 << 20, MemoryBudget: budget,
	}, Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g)
	defer srv.Close()
	defer close(release) // before the servers close: they wait for the held requests

	body := strings.Repeat("x", size)
	admitted, refused := 0, 0
	// One at a time, each held at the upstream once admitted, so the count does not depend
	// on how concurrent reads interleave.
	for i := range 8 {
		done := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/charges", strings.NewReader(body))
			req.Header.Set("Idempotency-Key", fmt.Sprintf("big-%d", i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- -1 // cut off while sending a body the gateway had refused
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		before := int(arrived.Load())
		deadline := time.After(20 * time.Second)
	wait:
		for {
			select {
			case status := <-done:
				if status != http.StatusServiceUnavailable && status != -1 {
					t.Fatalf("POST %d: status %d, want 503 (over the budget) or held at the upstream", i, status)
				}
				refused++
				break wait
			case <-deadline:
				t.Fatalf("POST %d neither reached the upstream nor was refused in 20s", i)
			case <-time.After(5 * time.Millisecond):
				if int(arrived.Load()) > before {
					admitted++
					break wait
				}
			}
		}
	}
	if admitted != 2 || refused != 6 {
		t.Fatalf("under a %d-byte budget, %d POSTs of %d bytes were admitted at once (%d refused), want 2: "+
			"each holds its read buffer and its detached copy (%d bytes in use)", budget, admitted, size, refused, g.budget.InUse())
	}
	if inUse := g.budget.InUse(); inUse < 2*2*size || inUse > budget {
		t.Fatalf("budget in use %d with 2 requests held, want between %d and %d", inUse, 2*2*size, budget)
	}
}
