// Command payments-tx serves a payments API whose handler writes an orders row in the same
// PostgreSQL transaction as its idempotency record (pgstore.TxRunner): the row and the stored
// answer commit together or not at all, so a retry with the same Idempotency-Key replays the
// answer and never inserts a second row, even after a crash.
//
// PostgreSQL comes from IDEM_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test).
//
//	go run ./examples/payments-tx                  # two POSTs with one key, then the row count
//	go run ./examples/payments-tx -listen :8080    # serve POST /orders
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/pgstore"
)

// app is the payments API over one orders table and one idem records table.
type app struct {
	db     *pgxpool.Pool
	orders string // quoted table name
}

// setup creates the tables (if missing) and returns the API behind idemhttp in transaction mode.
// scopeSecret keys the HMAC that turns the caller's API key into its scope, so that stored
// scopes cannot be tested against guesses of API keys. In a real service it comes from a secret
// store, the same for every server that shares the idem store.
var scopeSecret = []byte("example scope secret of 32 bytes")

func setup(ctx context.Context, db *pgxpool.Pool, ordersTable, idemTable string) (*app, http.Handler, error) {
	a := &app{db: db, orders: pgx.Identifier{ordersTable}.Sanitize()}
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+a.orders+` (
		id bigserial PRIMARY KEY, customer text NOT NULL, amount bigint NOT NULL)`); err != nil {
		return nil, nil, err
	}
	st, err := pgstore.New(db, pgstore.Options{Table: idemTable})
	if err != nil {
		return nil, nil, err
	}
	if err := st.Migrate(ctx); err != nil {
		return nil, nil, err
	}
	mw, err := idemhttp.New(idemhttp.Options{
		Runner:     pgstore.NewTxRunner(st, pgstore.TxOptions{}),
		RequireKey: true,
		Scope:      idemhttp.KeyedHeaderScope("Authorization", scopeSecret),
	})
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw(http.HandlerFunc(a.createOrder)))
	return a, mux, nil
}

// createOrder inserts the order through the request's transaction: it commits with the
// idempotency record, or, if this handler answers 5xx or panics, neither commits.
func (a *app) createOrder(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Customer string `json:"customer"`
		Amount   int64  `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Customer == "" || in.Amount <= 0 {
		http.Error(w, "want {\"customer\": ..., \"amount\": > 0}", http.StatusBadRequest)
		return
	}
	tx := pgstore.TxFromContext(r.Context())
	var id int64
	err := tx.QueryRow(r.Context(), `INSERT INTO `+a.orders+` (customer, amount) VALUES ($1, $2) RETURNING id`,
		in.Customer, in.Amount).Scan(&id)
	if err != nil {
		http.Error(w, "could not place the order", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":%d,"customer":%q,"amount":%d}`, id, in.Customer, in.Amount)
}

// count returns the number of order rows.
func (a *app) count(ctx context.Context) (int, error) {
	var n int
	err := a.db.QueryRow(ctx, `SELECT count(*) FROM `+a.orders).Scan(&n)
	return n, err
}

func main() {
	listen := flag.String("listen", "", "serve on this address instead of running the demo")
	flag.Parse()
	ctx := context.Background()
	db, err := pgxpool.New(ctx, cmp.Or(os.Getenv("IDEM_POSTGRES_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	a, h, err := setup(ctx, db, "example_orders", "example_orders_idem")
	if err != nil {
		log.Fatal(err)
	}
	if *listen != "" {
		log.Fatal(http.ListenAndServe(*listen, h))
	}

	srv := httptest.NewServer(h)
	defer srv.Close()
	before, err := a.count(ctx)
	if err != nil {
		log.Fatal(err)
	}
	key := fmt.Sprintf("order-%d", before) // a new key for each run of the demo
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"customer":"c1","amount":4200}`))
		req.Header.Set("Authorization", "Bearer sk_demo")
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s replayed=%q %s\n", resp.Status, resp.Header.Get(idemhttp.ReplayedHeader), body)
	}
	after, err := a.count(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("order rows added by two POSTs with one key: %d\n", after-before)
}
