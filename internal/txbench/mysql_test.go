package txbench

import (
	"context"
	"database/sql"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/mysqlstore"
)

func openMySQL(t *testing.T) *backend {
	dsn := testenv.MySQLDSN(t)
	if dsn == "" {
		return nil
	}
	ctx := context.Background()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var trips atomic.Int64
	dialer := &net.Dialer{}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &flights{Conn: c, n: &trips}, nil
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(20)
	db.SetMaxIdleConns(20)
	t.Cleanup(func() { _ = db.Close() })
	id := suffix()
	orders, idemTable := "txbench_orders_"+id, "txbench_idem_"+id
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+orders+
		" (id bigint AUTO_INCREMENT PRIMARY KEY, customer varchar(64) NOT NULL, amount bigint NOT NULL) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+orders+", "+idemTable) })
	st, err := mysqlstore.New(db, mysqlstore.Options{Table: idemTable})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	b := sqlBackend("MySQL/MariaDB (mysqlstore)", db, orders, trips.Load,
		func(r *http.Request) *sql.Tx { return mysqlstore.TxFromContext(r.Context()) },
		idemhttp.Options{Runner: mysqlstore.NewTxRunner(st, mysqlstore.TxOptions{}), RequireKey: true, Scope: idemhttp.SingleCaller()}, t)
	// START TRANSACTION and COMMIT are the driver's own round trips for a *sql.Tx, and the
	// claim must precede the handler and the completion follow it: the claim (one INSERT) and
	// the completion (one UPDATE) are two round trips more, and none can be fewer.
	b.extra = 2
	b.server = []string{"mariadbd", "mysqld"}
	return b
}

// sqlBackend serves orders on a database/sql database: bare in a transaction of db's, and
// behind idemhttp with opt's Runner, whose transaction txOf finds.
func sqlBackend(name string, db *sql.DB, orders string, trips func() int64, txOf func(*http.Request) *sql.Tx, opt idemhttp.Options, t *testing.T) *backend {
	insert := "INSERT INTO " + orders + " (customer, amount) VALUES (?, ?)"
	add := func(ctx context.Context, tx *sql.Tx, in order) (int64, error) {
		res, err := tx.ExecContext(ctx, insert, in.Customer, in.Amount)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, ok := decode(w, r)
		if !ok {
			return
		}
		tx, err := db.BeginTx(r.Context(), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer func() { _ = tx.Rollback() }()
		id, err := add(r.Context(), tx, in)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := tx.Commit(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		created(w, id, in)
	})
	mw, err := idemhttp.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	tx := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, ok := decode(w, r)
		if !ok {
			return
		}
		id, err := add(r.Context(), txOf(r), in)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		created(w, id, in) // idemhttp sends it once the transaction has committed
	}))
	return &backend{
		name: name, bare: bare, tx: tx, trips: trips,
		rows: func(ctx context.Context) (n int, err error) {
			err = db.QueryRowContext(ctx, "SELECT count(*) FROM "+orders).Scan(&n)
			return n, err
		},
	}
}
