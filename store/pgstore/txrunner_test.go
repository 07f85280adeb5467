package pgstore_test

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/pgstore"
)

// orderHandler inserts one order row through the request's transaction and answers 201 with
// its id. pause holds the transaction open a while; fail, when it returns a status, answers
// that status after the insert; a status of -1 panics after the insert.
type orderHandler struct {
	st     *pgstore.Store
	orders string
	pause  time.Duration
	fail   atomic.Int32
	began  chan struct{} // if set, receives one value per request once its row is inserted
	hold   chan struct{} // if set, the handler waits on it before answering
}

func (h *orderHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tx := pgstore.TxFromContext(r.Context())
	if tx == nil {
		http.Error(w, "no transaction", http.StatusInternalServerError)
		return
	}
	var id int64
	if err := tx.QueryRow(r.Context(), `INSERT INTO `+h.orders+` (customer, amount) VALUES ('c1', 4200) RETURNING id`).Scan(&id); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if h.began != nil {
		h.began <- struct{}{}
	}
	if h.hold != nil {
		<-h.hold
	}
	time.Sleep(h.pause)
	switch f := h.fail.Load(); {
	case f == -1:
		panic("order handler fails")
	case f != 0:
		http.Error(w, "failed", int(f))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, strconv.FormatInt(id, 10))
}

// txServer serves h behind idemhttp in transaction mode, on 127.0.0.1.
func txServer(t *testing.T, st *pgstore.Store, opt pgstore.TxOptions, h http.Handler) *httptest.Server {
	t.Helper()
	mw, err := idemhttp.New(idemhttp.Options{Runner: pgstore.NewTxRunner(st, opt), Logger: slog.New(slog.DiscardHandler), Scope: idemhttp.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mw(h))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panicking handler's panic
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

type reply struct {
	status   int
	body     string
	replayed bool
	retry    string
}

func post(t *testing.T, srv *httptest.Server, key, body string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return reply{}
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Error(err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get(idemhttp.ReplayedHeader) == "true", retry: resp.Header.Get("Retry-After")}
}

// 50 concurrent identical requests: one order row and one execution; every other request
// replays its answer, or, when its wait for the first transaction is short, gets 409.
func TestTxRunnerHTTPConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		wait     time.Duration
		pause    time.Duration
		want409s bool
	}{
		{"wait", 0, 100 * time.Millisecond, false},
		{"short wait", 20 * time.Millisecond, time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(t, pgstore.Options{})
			orders := ordersTable(t, st)
			srv := txServer(t, st, pgstore.TxOptions{Wait: tc.wait}, &orderHandler{st: st, orders: orders, pause: tc.pause})
			const n = 50
			replies := make([]reply, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-start
					replies[i] = post(t, srv, "order-1", `{"amount":4200}`)
				})
			}
			close(start)
			wg.Wait()
			if got := countRows(t, st, orders); got != 1 {
				t.Fatalf("%d order rows, want 1", got)
			}
			executed, replayed, conflicts := 0, 0, 0
			var first string
			for _, r := range replies {
				switch {
				case r.status == http.StatusCreated && !r.replayed:
					executed++
					first = r.body
				case r.status == http.StatusCreated:
					replayed++
				case r.status == http.StatusConflict && r.retry == "1":
					conflicts++
				default:
					t.Fatalf("unexpected reply %+v", r)
				}
			}
			if executed != 1 {
				t.Fatalf("%d executions, want 1", executed)
			}
			for _, r := range replies {
				if r.status == http.StatusCreated && r.body != first {
					t.Fatalf("reply %q differs from the first %q", r.body, first)
				}
			}
			if tc.want409s && conflicts == 0 {
				t.Fatalf("no 409 with a %s wait on a %s transaction", tc.wait, tc.pause)
			}
			if !tc.want409s && conflicts != 0 {
				t.Fatalf("%d 409s with a 10s wait on a %s transaction", conflicts, tc.pause)
			}
			t.Logf("executed %d, replayed %d, 409 %d", executed, replayed, conflicts)
		})
	}
}

// A handler that answers 500, or panics, after its insert leaves neither the row nor a record;
// the retry executes, once.
func TestTxRunnerHTTPFailureRollsBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail int32
	}{{"500", 500}, {"panic", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStore(t, pgstore.Options{})
			orders := ordersTable(t, st)
			h := &orderHandler{st: st, orders: orders}
			h.fail.Store(tc.fail)
			srv := txServer(t, st, pgstore.TxOptions{}, h)
			if r := post(t, srv, "k", "a"); r.status != http.StatusInternalServerError || r.replayed {
				t.Fatalf("failing handler: %+v", r)
			}
			if got := countRows(t, st, orders); got != 0 {
				t.Fatalf("%d order rows after a failed request, want 0", got)
			}
			if _, err := st.Get(context.Background(), idemhttp.StorageKey("", "k")); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("record after a failed request: %v, want ErrNotFound", err)
			}
			h.fail.Store(0)
			r1 := post(t, srv, "k", "a")
			r2 := post(t, srv, "k", "a")
			if r1.status != http.StatusCreated || r1.replayed || r2.status != http.StatusCreated || !r2.replayed || r1.body != r2.body {
				t.Fatalf("retry %+v, then %+v: want 201 executed, then its replay", r1, r2)
			}
			if got := countRows(t, st, orders); got != 1 {
				t.Fatalf("%d order rows after the retries, want 1", got)
			}
			if r := post(t, srv, "k", "another body"); r.status != http.StatusUnprocessableEntity {
				t.Fatalf("another body with the key: %+v, want 422", r)
			}
		})
	}
}

// A duplicate that arrives while the first request's transaction is open waits for it, then
// replays its answer.
func TestTxRunnerHTTPDuplicateWaits(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	orders := ordersTable(t, st)
	h := &orderHandler{st: st, orders: orders, began: make(chan struct{}, 2), hold: make(chan struct{})}
	srv := txServer(t, st, pgstore.TxOptions{}, h)
	var first, second reply
	var wg sync.WaitGroup
	wg.Go(func() { first = post(t, srv, "k", "a") })
	<-h.began // the first transaction is open, its row inserted
	done := make(chan struct{})
	go func() {
		defer close(done)
		second = post(t, srv, "k", "a")
	}()
	select {
	case <-done:
		t.Fatalf("the duplicate answered %+v while the first transaction was open", second)
	case <-h.began:
		t.Fatal("the duplicate ran the handler while the first transaction was open")
	case <-time.After(300 * time.Millisecond):
	}
	close(h.hold)
	wg.Wait()
	<-done
	if first.status != http.StatusCreated || first.replayed {
		t.Fatalf("first %+v, want 201 executed", first)
	}
	if second.status != http.StatusCreated || !second.replayed || second.body != first.body {
		t.Fatalf("duplicate %+v, want the replay of %+v", second, first)
	}
	if got := countRows(t, st, orders); got != 1 {
		t.Fatalf("%d order rows, want 1", got)
	}
}

// A transaction that fails at COMMIT (here a deferred foreign key) stored nothing: the client
// gets 503, never the handler's 201, and no row or record remains.
func TestTxRunnerHTTPCommitFails(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	orders := ordersTable(t, st)
	ctx := context.Background()
	if _, err := st.Pool().Exec(ctx, `ALTER TABLE `+orders+` ADD COLUMN parent bigint REFERENCES `+orders+` (id) DEFERRABLE INITIALLY DEFERRED`); err != nil {
		t.Fatal(err)
	}
	srv := txServer(t, st, pgstore.TxOptions{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := pgstore.TxFromContext(r.Context())
		if _, err := tx.Exec(r.Context(), `INSERT INTO `+orders+` (customer, amount, parent) VALUES ('c1', 4200, -1)`); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	if r := post(t, srv, "k", "a"); r.status != http.StatusServiceUnavailable || r.retry == "" {
		t.Fatalf("failed commit answered %+v, want 503 with Retry-After", r)
	}
	if got := countRows(t, st, orders); got != 0 {
		t.Fatalf("%d order rows, want 0", got)
	}
	if _, err := st.Get(ctx, idemhttp.StorageKey("", "k")); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after a failed commit: %v, want ErrNotFound", err)
	}
}
