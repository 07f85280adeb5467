package mysqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/mysqlstore"
)

// errCommitLost is the failure the commit hook injects.
var errCommitLost = errors.New("commit lost (injected)")

// commitHook wraps the MySQL driver: while fail is set, a transaction's Commit rolls the
// transaction back on the real server and returns errCommitLost, as a COMMIT the server
// refused or whose connection broke would. Everything else goes to the driver unchanged.
type commitHook struct {
	driver.Connector
	fail *atomic.Bool
}

func (h commitHook) Connect(ctx context.Context) (driver.Conn, error) {
	c, err := h.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return hookConn{c, h.fail}, nil
}

type hookConn struct {
	driver.Conn
	fail *atomic.Bool
}

func (c hookConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return hookTx{tx, c.fail}, nil
}

func (c hookConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c hookConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c hookConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c hookConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

func (c hookConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c hookConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

type hookTx struct {
	driver.Tx
	fail *atomic.Bool
}

func (t hookTx) Commit() error {
	if t.fail.Load() {
		_ = t.Tx.Rollback()
		return errCommitLost
	}
	return t.Tx.Commit()
}

// TestDoTxCommitFailureIsNotKept: when the COMMIT fails, DoTx reports a store error and Kept
// false, never the executed result: nothing was written, no record remains, and a retry with
// the same key executes.
func TestDoTxCommitFailureIsNotKept(t *testing.T) {
	t.Parallel()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	hdb := sql.OpenDB(commitHook{conn, &fail})
	hdb.SetMaxOpenConns(4)
	t.Cleanup(func() { _ = hdb.Close() })
	table := randomName("t_")
	st, err := mysqlstore.New(hdb, mysqlstore.Options{Table: table, Database: testDatabase})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	orders := randomName("orders_")
	if _, err := hdb.ExecContext(ctx, fmt.Sprintf("CREATE TABLE `%s`.`%s` (id bigint AUTO_INCREMENT PRIMARY KEY, customer varchar(64) NOT NULL)", testDatabase, orders)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		_, _ = hdb.ExecContext(context.Background(), fmt.Sprintf("DROP TABLE IF EXISTS `%s`.`%s`", testDatabase, orders))
		dropTable(t, hdb, testDatabase, table)
	})
	fp := idem.Fingerprint([]byte("order c1"))
	ran := 0
	place := func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		ran++
		_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO `%s`.`%s` (customer) VALUES ('c1')", testDatabase, orders))
		return idem.Response{Status: 201, Body: []byte("ok")}, err
	}
	fail.Store(true)
	res, err := st.DoTx(ctx, "commit-fails", fp, place)
	fail.Store(false)
	if err == nil || res.Kept || res.Replayed {
		t.Fatalf("a COMMIT that failed: %+v, %v; want a store error, not kept", res, err)
	}
	if !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("a COMMIT that failed: %v, want an idem.ErrStoreUnavailable", err)
	}
	var n int
	if err := hdb.QueryRowContext(ctx, fmt.Sprintf("SELECT count(*) FROM `%s`.`%s`", testDatabase, orders)).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v) after a failed COMMIT, want 0", n, err)
	}
	res, err = st.DoTx(ctx, "commit-fails", fp, place)
	if err != nil || !res.Kept || res.Replayed || ran != 2 {
		t.Fatalf("retry after a failed COMMIT: %+v, %v, fn ran %d times; want executed and kept", res, err, ran)
	}
}
