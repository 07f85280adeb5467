package pgstore_test

import (
	"context"
	"fmt"
	"log"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
)

// An engine on PostgreSQL: open, migrate, and run effects at most once per key.
func Example() {
	ctx := context.Background()
	st, err := pgstore.Open(ctx, "postgres://postgres@127.0.0.1:5432/test", pgstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil { // at every start; a no-op when up to date
		log.Fatal(err)
	}
	sw, err := pgstore.StartSweeper(st, pgstore.SweeperOptions{}) // delete expired rows
	if err != nil {
		log.Fatal(err)
	}
	defer sw.Stop()
	eng, err := idem.New(st, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := eng.Do(ctx, "tenant-1:pay-42", idem.Fingerprint([]byte("pay 42")), func(ctx context.Context) (idem.Response, error) {
		return idem.Response{Status: 201, Body: []byte("paid")}, nil
	})
	fmt.Println(string(res.Response.Body), res.Replayed, err)
}

// Same-transaction mode: the order row and the idempotency record commit together.
func ExampleStore_DoTx() {
	ctx := context.Background()
	st, err := pgstore.Open(ctx, "postgres://postgres@127.0.0.1:5432/test", pgstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	res, err := st.DoTx(ctx, "tenant-1:order-7", idem.Fingerprint([]byte("order 7")), func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO orders (amount) VALUES (4200) RETURNING id`).Scan(&id); err != nil {
			return idem.Response{}, err // rolls back: no order, no record; a retry executes
		}
		return idem.Response{Status: 201, Body: strconv.AppendInt(nil, id, 10)}, nil
	})
	if err != nil {
		log.Fatal(err) // idem.ErrMismatch, idem.ErrInFlight, a store error or the function's
	}
	fmt.Println(string(res.Response.Body), res.Replayed)
}

// Group commit for a busy service: claims and completions that arrive together share
// transactions, two at a time; each call still gets its own statement's answer, after the commit.
func ExampleOptions_groupCommit() {
	ctx := context.Background()
	st, err := pgstore.Open(ctx, "postgres://postgres@127.0.0.1:5432/test", pgstore.Options{GroupCommit: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close() // stops the group-commit workers
	if err := st.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	eng, err := idem.New(st, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	_ = eng // eng.Do from as many goroutines as the service has requests
}
