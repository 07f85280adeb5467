package idemhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/sqlitestore"
)

// Each store of the foundation under the middleware: the seed scenario, one key hammered
// concurrently, many keys at once, a large response, a released 500 and two tenants.
func TestStoresUnderMiddleware(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) idem.Store{
		"memstore": func(t *testing.T) idem.Store { return memstore.New() },
		"sqlitestore": func(t *testing.T) idem.Store {
			st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), sqlitestore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storeScenario(t, open(t))
		})
	}
}

func storeScenario(t *testing.T, st idem.Store) {
	var effects sync.Map // key → count
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("Idempotency-Key")
		n, _ := effects.LoadOrStore(k, new(atomic.Int64))
		c := n.(*atomic.Int64).Add(1)
		switch r.URL.Path {
		case "/slow":
			time.Sleep(100 * time.Millisecond)
		case "/fail":
			w.WriteHeader(500)
			return
		case "/big":
			w.Write(make([]byte, 2<<20))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"key":%q,"n":%d,"tenant":%q}`, k, c, r.Header.Get("X-API-Key"))
	})
	b := setup(t, st, idem.Options{}, idemhttp.Options{Scope: idemhttp.HeaderScope("X-API-Key")}, h)
	count := func(k string) int64 {
		n, ok := effects.Load(k)
		if !ok {
			return 0
		}
		return n.(*atomic.Int64).Load()
	}

	// Seed scenario.
	r1 := b.do("POST", "/pay", "seed", `{"amount":1}`)
	r2 := b.do("POST", "/pay", "seed", `{"amount":1}`)
	sameReply(t, r1, r2)
	if r := b.do("POST", "/pay", "seed", `{"amount":2}`); r.Status != 422 || count("seed") != 1 {
		t.Fatalf("mismatch: %d, %d effects", r.Status, count("seed"))
	}

	// One key, 50 at once, against a slow handler.
	var wg sync.WaitGroup
	replies := make([]reply, 50)
	for i := range replies {
		wg.Go(func() { replies[i] = b.do("POST", "/slow", "hot", "x") })
	}
	wg.Wait()
	var first *reply
	for i, r := range replies {
		switch r.Status {
		case 201:
			if first == nil {
				first = &replies[i]
			} else {
				sameReply(t, *first, r)
			}
		case 409:
		default:
			t.Fatalf("hot key: %d %s %v", r.Status, r.Body, r.Err)
		}
	}
	if count("hot") != 1 {
		t.Fatalf("hot key ran %d times", count("hot"))
	}

	// Many keys at once, each sent twice.
	for i := range 40 {
		wg.Go(func() {
			k := fmt.Sprint("many-", i)
			a := b.do("POST", "/pay", k, "x")
			c := b.do("POST", "/pay", k, "x")
			if a.Status != 201 || c.Status != 201 || string(a.Body) != string(c.Body) {
				t.Errorf("%s: %d %d", k, a.Status, c.Status)
			}
		})
	}
	wg.Wait()
	for i := range 40 {
		if n := count(fmt.Sprint("many-", i)); n != 1 {
			t.Fatalf("many-%d ran %d times", i, n)
		}
	}

	// Oversize: kept without body.
	b.do("POST", "/big", "big", "x")
	if r := b.do("POST", "/big", "big", "x"); problemType(t, r) != idemhttp.ProblemNotRetained || count("big") != 1 {
		t.Fatalf("big: %d %s", r.Status, r.Body)
	}
	// 500 released: runs again.
	b.do("POST", "/fail", "fail", "x")
	b.do("POST", "/fail", "fail", "x")
	if count("fail") != 2 {
		t.Fatalf("fail ran %d times", count("fail"))
	}
	// Tenants apart.
	ta := b.do("POST", "/pay", "tenant-key", "x", "X-API-Key", "a")
	tb := b.do("POST", "/pay", "tenant-key", "y", "X-API-Key", "b")
	if ta.Status != 201 || tb.Status != 201 || count("tenant-key") != 2 {
		t.Fatalf("tenants: %d %d %d", ta.Status, tb.Status, count("tenant-key"))
	}
}
