package txbench

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
)

func openPostgres(t *testing.T) *backend {
	url := testenv.PostgresURL(t)
	if url == "" {
		return nil
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	var trips atomic.Int64
	dialer := &net.Dialer{}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &flights{Conn: c, n: &trips}, nil
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	id := suffix()
	orders := pgx.Identifier{"txbench_orders_" + id}.Sanitize()
	idemTable := "txbench_idem_" + id
	if _, err := pool.Exec(ctx, `CREATE TABLE `+orders+` (id bigserial PRIMARY KEY, customer text NOT NULL, amount bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+orders+", "+idemTable) })
	st, err := pgstore.New(pool, pgstore.Options{Table: idemTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO ` + orders + ` (customer, amount) VALUES ($1, $2) RETURNING id`
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, ok := decode(w, r)
		if !ok {
			return
		}
		tx, err := pool.Begin(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		var id int64
		if err := tx.QueryRow(r.Context(), insert, in.Customer, in.Amount).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := tx.Commit(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		created(w, id, in)
	})
	mw, err := idemhttp.New(idemhttp.Options{Runner: pgstore.NewTxRunner(st, pgstore.TxOptions{}), RequireKey: true, Scope: idemhttp.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	tx := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, ok := decode(w, r)
		if !ok {
			return
		}
		var id int64
		if err := pgstore.TxFromContext(r.Context()).QueryRow(r.Context(), insert, in.Customer, in.Amount).Scan(&id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		created(w, id, in) // idemhttp sends it once the transaction has committed
	}))
	return &backend{
		name: "PostgreSQL (pgstore)", bare: bare, tx: tx,
		trips: trips.Load, extra: 0, server: []string{"postgres"},
		rows: func(ctx context.Context) (n int, err error) {
			err = pool.QueryRow(ctx, "SELECT count(*) FROM "+orders).Scan(&n)
			return n, err
		},
	}
}
