package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
)

// ordersTable creates a real table for the caller's writes, dropped at the end of t.
func ordersTable(t *testing.T, st *pgstore.Store) string {
	t.Helper()
	name := pgx.Identifier{testSchema, randomName("orders_")}.Sanitize()
	ctx := context.Background()
	if _, err := st.Pool().Exec(ctx, `CREATE TABLE `+name+` (id bigserial PRIMARY KEY, customer text NOT NULL, amount bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = st.Pool().Exec(ctx, `DROP TABLE IF EXISTS `+name) })
	return name
}

func countRows(t *testing.T, st *pgstore.Store, table string) int {
	t.Helper()
	var n int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// placeOrder is the caller's effect: one order row, and its id as the response.
func placeOrder(orders string, pause time.Duration) pgstore.TxFunc {
	return func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO `+orders+` (customer, amount) VALUES ('c1', 4200) RETURNING id`).Scan(&id); err != nil {
			return idem.Response{}, err
		}
		time.Sleep(pause) // hold the claim a while, so duplicates pile up on it
		return idem.Response{Status: 201, Body: strconv.AppendInt(nil, id, 10)}, nil
	}
}

// 100 concurrent identical requests: one order row, one response, 99 replays of it.
func TestDoTxConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	orders := ordersTable(t, st)
	fp := idem.Fingerprint([]byte("order c1 4200"))
	for round := range 3 {
		key := fmt.Sprintf("order-%d", round)
		const n = 100
		results := make([]idem.Result, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = st.DoTx(context.Background(), key, fp, placeOrder(orders, 20*time.Millisecond))
			})
		}
		close(start)
		wg.Wait()
		executed := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: DoTx %d: %v", round, i, errs[i])
			}
			if !results[i].Replayed {
				executed++
			}
			if !results[i].Response.Equal(results[0].Response) || results[i].Response.Status != 201 {
				t.Fatalf("round %d: response %d = %+v, want %+v", round, i, results[i].Response, results[0].Response)
			}
		}
		if executed != 1 {
			t.Fatalf("round %d: %d executions, want 1", round, executed)
		}
		if got := countRows(t, st, orders); got != round+1 {
			t.Fatalf("round %d: %d order rows, want %d", round, got, round+1)
		}
	}
}

func TestDoTxRollbackLeavesNothing(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	orders := ordersTable(t, st)
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	boom := errors.New("card declined")
	_, err := st.DoTx(ctx, "k", fp, func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
		if _, err := placeOrder(orders, 0)(ctx, tx); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("DoTx = %v, want the function's error", err)
	}
	if _, err := st.Get(ctx, "k"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after rollback: %v, want ErrNotFound", err)
	}
	if n := countRows(t, st, orders); n != 0 {
		t.Fatalf("%d order rows after rollback", n)
	}

	// A duplicate waiting on a claim that rolls back takes the key and executes.
	var wg sync.WaitGroup
	var firstErr, secondErr error
	var second idem.Result
	claimed := make(chan struct{})
	wg.Go(func() {
		_, firstErr = st.DoTx(ctx, "k", fp, func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
			close(claimed)
			time.Sleep(100 * time.Millisecond)
			return idem.Response{}, boom
		})
	})
	wg.Go(func() {
		<-claimed
		second, secondErr = st.DoTx(ctx, "k", fp, placeOrder(orders, 0))
	})
	wg.Wait()
	if !errors.Is(firstErr, boom) || secondErr != nil || second.Replayed {
		t.Fatalf("first %v; second %+v %v: want the second to execute", firstErr, second, secondErr)
	}
	if n := countRows(t, st, orders); n != 1 {
		t.Fatalf("%d order rows, want 1", n)
	}

	// A panic rolls back too, and goes on.
	func() {
		defer func() { _ = recover() }()
		_, _ = st.DoTx(ctx, "p", fp, func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
			_, _ = placeOrder(orders, 0)(ctx, tx)
			panic("boom")
		})
	}()
	if _, err := st.Get(ctx, "p"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after panic: %v, want ErrNotFound", err)
	}
	if n := countRows(t, st, orders); n != 1 {
		t.Fatalf("%d order rows after a panic, want 1", n)
	}
}

func TestDoTxMismatchInFlightAndEngine(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
	orders := ordersTable(t, st)
	ctx := context.Background()
	fpA, fpB := idem.Fingerprint([]byte("a")), idem.Fingerprint([]byte("b"))
	if _, err := st.DoTx(ctx, "k", fpA, placeOrder(orders, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DoTx(ctx, "k", fpB, placeOrder(orders, 0)); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("other fingerprint: %v, want ErrMismatch", err)
	}
	// An engine on the same store holds a key: DoTx reports it in flight.
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "held", Fingerprint: fpA, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatal(err)
	}
	_, err = st.DoTx(ctx, "held", fpA, placeOrder(orders, 0))
	var inFlight *idem.InFlightError
	if !errors.As(err, &inFlight) || !errors.Is(err, idem.ErrInFlight) || inFlight.RetryAfter < 59*time.Second {
		t.Fatalf("held key: %v, want an InFlightError with about a minute to wait", err)
	}
	// What the engine completed, DoTx replays; what DoTx completed, the engine replays.
	eng, err := idem.New(st, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Do(ctx, "by-engine", fpA, func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 200, Body: []byte("engine")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	r, err := st.DoTx(ctx, "by-engine", fpA, placeOrder(orders, 0))
	if err != nil || !r.Replayed || string(r.Response.Body) != "engine" {
		t.Fatalf("DoTx after engine: %+v %v", r, err)
	}
	r, err = eng.Do(ctx, "k", fpA, func(context.Context) (idem.Response, error) {
		t.Error("the engine executed a key DoTx completed")
		return idem.Response{}, nil
	})
	if err != nil || !r.Replayed || r.Response.Status != 201 {
		t.Fatalf("engine after DoTx: %+v %v", r, err)
	}
	if n := countRows(t, st, orders); n != 1 {
		t.Fatalf("%d order rows, want 1", n)
	}
	if _, err := st.DoTx(ctx, "k", fpA, nil); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("nil function: %v", err)
	}
	if _, err := st.DoTx(ctx, "", fpA, placeOrder(orders, 0)); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("empty key: %v", err)
	}
}
