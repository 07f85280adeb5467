package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/store/sqlitestore"
)

// sqlitestore's TxRunner works in a consumer as pgstore's does: concurrent duplicates make one
// row, and a failing handler leaves none and is run again by the redelivery.
func TestTxRunnerSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "charges.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The business table lives in the store's file; create it in a transaction of the runner's.
	run := sqlitestore.NewTxRunner(st, sqlitestore.TxOptions{})
	setup := consumer.Options{Key: func(*consumer.Message) (string, error) { return "setup", nil }, Logger: discard()}
	setup.Runner = run
	mk, err := consumer.New(setup, func(ctx context.Context, _ *consumer.Message) ([]byte, error) {
		_, err := sqlitestore.TxFromContext(ctx).ExecContext(ctx, "CREATE TABLE charges (order_id TEXT NOT NULL)")
		return nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := mk.Handle(ctx, &consumer.Message{Body: []byte("setup")}); r.Outcome != consumer.OutcomeExecuted {
		t.Fatalf("creating the table: %v %v", r.Outcome, r.Err)
	}

	boom := errors.New("declined")
	var mu sync.Mutex
	failOnce := map[string]bool{"order/1": true}
	c, err := consumer.New(consumer.Options{Runner: run, Key: orderKey, Logger: discard()}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		id := strings.SplitN(string(m.Body), ":", 3)[1]
		if _, err := sqlitestore.TxFromContext(ctx).ExecContext(ctx, "INSERT INTO charges (order_id) VALUES (?)", id); err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if failOnce["order/"+id] {
			delete(failOnce, "order/"+id)
			return nil, boom
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	outcomes := make(chan consumer.Outcome, 3*8)
	for o := range 3 {
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				outcomes <- c.Handle(ctx, &consumer.Message{Body: fmt.Appendf(nil, "order:%d:x", o)}).Outcome
			}()
		}
	}
	wg.Wait()
	close(outcomes)
	n := map[consumer.Outcome]int{}
	for o := range outcomes {
		n[o]++
	}
	// Order 1's first attempt failed (rolled back); one of its other deliveries ran it.
	if n[consumer.OutcomeExecuted] != 3 || n[consumer.OutcomeFailed] != 1 || n[consumer.OutcomeReplay] != 20 {
		t.Fatalf("outcomes %v, want 3 processed, 1 failed, 20 duplicates", n)
	}
	db, err := sql.Open("sqlite", "file:"+st.Path()+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT order_id, count(*) FROM charges GROUP BY order_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var id string
		var k int
		if err := rows.Scan(&id, &k); err != nil {
			t.Fatal(err)
		}
		got[id] = k
	}
	if len(got) != 3 || got["0"] != 1 || got["1"] != 1 || got["2"] != 1 {
		t.Fatalf("charge rows per order %v, want one each for 0, 1 and 2", got)
	}
}
