package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/storetest"
)

// sideDB opens a separate handle on the test server with extra session settings.
func sideDB(t *testing.T, maxConns int, params map[string]string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params = params
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := sql.OpenDB(c)
	d.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// A statement that waits on a lock too long fails (InnoDB's lock wait timeout, MySQL's
// statement timeout for writes), promptly, and changes nothing.
func TestLockWaitTimeout(t *testing.T) {
	t.Parallel()
	st := newStore(t, mysqlstore.Options{})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	now := time.Now()
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatal(err)
	}
	tx, err := st.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT 1 FROM "+st.Table()+" WHERE `key` = 'k' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	timed, _ := mysqlstore.New(sideDB(t, 2, map[string]string{"innodb_lock_wait_timeout": "1"}),
		mysqlstore.Options{Database: testDatabase, Table: tableName(st)})
	start := time.Now()
	_, err = timed.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now.Add(2 * time.Minute), Lease: time.Minute, TTL: time.Hour}) // a takeover: it must wait for the row
	var myErr *mysql.MySQLError
	if !errors.As(err, &myErr) || myErr.Number != 1205 {
		t.Fatalf("Reserve on a locked row = %v, want a lock wait timeout (1205)", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("lock wait timeout took %v", d)
	}
	err = timed.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 200}, now, now.Add(time.Hour))
	if !errors.As(err, &myErr) || myErr.Number != 1205 {
		t.Fatalf("Complete on a locked row = %v, want a lock wait timeout", err)
	}
	_ = tx.Rollback()
	rec, err := st.Get(ctx, "k")
	if err != nil || rec.Token != res.Record.Token || rec.State != idem.StateInProgress {
		t.Fatalf("record after timeouts: %+v %v, want the claim untouched", rec, err)
	}
}

// A full pool is a clear error within the caller's deadline, and the pool recovers.
func TestPoolExhausted(t *testing.T) {
	t.Parallel()
	st0 := newStore(t, mysqlstore.Options{})
	ctx := context.Background()
	d := sideDB(t, 1, nil)
	st, _ := mysqlstore.New(d, mysqlstore.Options{Database: testDatabase, Table: tableName(st0)})
	held, err := d.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fp := idem.Fingerprint(nil)
	c, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = st.Reserve(c, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reserve on a full pool = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("Reserve on a full pool returned after %v, want about the 300ms deadline", d)
	}
	_ = held.Close()
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}); err != nil || !res.Claimed {
		t.Fatalf("after the pool freed up: %v %+v", err, res)
	}
	_ = st.Close()
	if n := d.Stats().InUse; n != 0 {
		t.Errorf("%d connections still in use", n)
	}
}

func tableName(st *mysqlstore.Store) string {
	t := st.Table()
	return t[len("`"+testDatabase+"`.`") : len(t)-1]
}

// A call blocked on a row another transaction holds ends at its context's deadline, with an
// error that says the deadline passed.
func TestCallEndsAtDeadline(t *testing.T) {
	t.Parallel()
	st := newStore(t, mysqlstore.Options{})
	storetest.CallsEndAtDeadline(t, st, func(key string) func() {
		ctx := context.Background()
		tx, err := st.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "SELECT 1 FROM "+st.Table()+" WHERE `key` = ? FOR UPDATE", key); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback() }
	})
}
