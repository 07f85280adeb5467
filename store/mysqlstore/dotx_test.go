package mysqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/mysqlstore"
)

// DoTx with the caller's own typed transaction: executed, replayed, mismatched, rolled back.
func TestDoTx(t *testing.T) {
	t.Parallel()
	st := newStore(t, mysqlstore.Options{})
	d := db(t)
	ctx := context.Background()
	orders := "`" + testDatabase + "`.`" + randomName("orders_") + "`"
	if _, err := d.ExecContext(ctx, "CREATE TABLE "+orders+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, amount BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = d.ExecContext(ctx, "DROP TABLE IF EXISTS "+orders) })
	count := func() (n int) {
		t.Helper()
		if err := d.QueryRowContext(ctx, "SELECT count(*) FROM "+orders).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	boom := errors.New("declined")
	place := func(fail bool) mysqlstore.TxFunc {
		return func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+orders+" (amount) VALUES (4200)"); err != nil {
				return idem.Response{}, err
			}
			if fail {
				return idem.Response{}, boom
			}
			return idem.Response{Status: 201, Body: []byte("placed")}, nil
		}
	}
	fp := idem.Fingerprint([]byte("a"))
	if _, err := st.DoTx(ctx, "k", fp, place(true)); !errors.Is(err, boom) {
		t.Fatalf("failing function: %v, want its error", err)
	}
	if _, err := st.Get(ctx, "k"); !errors.Is(err, idem.ErrNotFound) || count() != 0 {
		t.Fatalf("after a rollback: record %v, %d rows; want neither", err, count())
	}
	r, err := st.DoTx(ctx, "k", fp, place(false))
	if err != nil || r.Replayed || !r.Kept || r.Response.Status != 201 {
		t.Fatalf("first: %+v %v", r, err)
	}
	r, err = st.DoTx(ctx, "k", fp, place(false))
	if err != nil || !r.Replayed || string(r.Response.Body) != "placed" {
		t.Fatalf("replay: %+v %v", r, err)
	}
	if _, err := st.DoTx(ctx, "k", idem.Fingerprint([]byte("b")), place(false)); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("other fingerprint: %v, want ErrMismatch", err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d order rows, want 1", n)
	}
	if _, err := st.DoTx(ctx, "k", fp, nil); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("nil function: %v", err)
	}
}

// Two DoTx whose functions lock two rows in opposite orders deadlock; InnoDB rolls one back
// (error 1213) and DoTx runs it again, so both complete, each kept once.
func TestDoTxRetriesDeadlock(t *testing.T) {
	t.Parallel()
	st := newStore(t, mysqlstore.Options{})
	d := db(t)
	ctx := context.Background()
	accounts := "`" + testDatabase + "`.`" + randomName("accounts_") + "`"
	if _, err := d.ExecContext(ctx, "CREATE TABLE "+accounts+" (id INT PRIMARY KEY, balance BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = d.ExecContext(ctx, "DROP TABLE IF EXISTS "+accounts) })
	if _, err := d.ExecContext(ctx, "INSERT INTO "+accounts+" VALUES (1, 0), (2, 0)"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	locked := make(chan struct{}, 2)
	transfer := func(name string, first, second int) mysqlstore.TxFunc {
		return func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			mu.Lock()
			runs[name]++
			n := runs[name]
			mu.Unlock()
			if _, err := tx.ExecContext(ctx, "UPDATE "+accounts+" SET balance = balance + 1 WHERE id = ?", first); err != nil {
				return idem.Response{}, err
			}
			if n == 1 { // the first run of each waits until both hold their first row
				locked <- struct{}{}
				for len(locked) < 2 {
					time.Sleep(time.Millisecond)
				}
			}
			if _, err := tx.ExecContext(ctx, "UPDATE "+accounts+" SET balance = balance + 1 WHERE id = ?", second); err != nil {
				return idem.Response{}, err
			}
			return idem.Response{Status: 200}, nil
		}
	}
	fp := idem.Fingerprint([]byte("t"))
	var wg sync.WaitGroup
	var errA, errB error
	wg.Go(func() { _, errA = st.DoTx(ctx, "a", fp, transfer("a", 1, 2)) })
	wg.Go(func() { _, errB = st.DoTx(ctx, "b", fp, transfer("b", 2, 1)) })
	wg.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("a: %v; b: %v; want both to pass, the deadlock victim on a second run", errA, errB)
	}
	if runs["a"]+runs["b"] != 3 {
		t.Fatalf("runs %v: want one of them run twice (the deadlock victim)", runs)
	}
	var sum int
	if err := d.QueryRowContext(ctx, "SELECT SUM(balance) FROM "+accounts).Scan(&sum); err != nil {
		t.Fatal(err)
	}
	if sum != 4 {
		t.Fatalf("balances sum to %d, want 4: each transfer committed once", sum)
	}
}

// A TxRunner duplicate that gives up waiting for the holder of its key leaves no wait behind
// on the server, where MariaDB would otherwise wait until the holder's transaction ends: with
// MariaDB's per-statement bound, with tries that do not wait when less than a second is left,
// and with MySQL's session setting. The holder's own statements run with the session's
// setting, untouched.
func TestTxRunnerWaitBound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		session bool
		wait    time.Duration
	}{
		{"statement", false, 2 * time.Second},
		{"polled", false, 700 * time.Millisecond},
		{"session", true, 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t, mysqlstore.Options{})
			if c.session {
				mysqlstore.UseSessionLockWait(st)
			}
			d := db(t)
			ctx := context.Background()
			var want int
			if err := d.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&want); err != nil {
				t.Fatal(err)
			}
			run := mysqlstore.NewTxRunner(st, mysqlstore.TxOptions{Wait: c.wait})
			fp := idem.Fingerprint([]byte("w"))
			started, release := make(chan struct{}), make(chan struct{})
			var seen int
			var holder sync.WaitGroup
			holder.Go(func() {
				_, err := run.Do(ctx, "k", fp, func(ctx context.Context) (idem.Response, error) {
					err := mysqlstore.TxFromContext(ctx).QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout").Scan(&seen)
					close(started)
					<-release
					return idem.Response{Status: 200}, err
				})
				if err != nil {
					t.Errorf("holder: %v", err)
				}
			})
			<-started
			defer func() { holder.Wait() }()
			defer close(release)
			start := time.Now()
			_, err := run.Do(ctx, "k", fp, func(context.Context) (idem.Response, error) {
				return idem.Response{}, errors.New("ran while the key was held")
			})
			if took := time.Since(start); !errors.Is(err, idem.ErrInFlight) || took > c.wait+time.Second {
				t.Fatalf("duplicate: %v after %v, want idem.ErrInFlight within %v", err, took, c.wait)
			}
			waiting := func() (n int) {
				if err := d.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE ?",
					"%"+tableName(st)+"%").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			// The server's wait ends before the client gives up; left behind, it would last
			// until the holder's transaction ends. 10s leaves room for a loaded machine.
			gaveUp := time.Now()
			for deadline := gaveUp.Add(10 * time.Second); waiting() > 0; time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the server still waits for the key %v after the duplicate gave up:\n%s", time.Since(gaveUp), lockWaits(t, d))
				}
			}
			if seen != want {
				t.Errorf("the holder's statements ran with innodb_lock_wait_timeout %d, want the session's %d", seen, want)
			}
		})
	}
}

// DoTx's transaction runs at the session's isolation level, as db.BeginTx(ctx, nil) does.
func TestDoTxIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	level := func(st *mysqlstore.Store) (got string) {
		t.Helper()
		_, err := st.DoTx(ctx, randomName("k"), idem.Fingerprint(nil), func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			return idem.Response{Status: 200}, tx.QueryRowContext(ctx,
				"SELECT trx_isolation_level FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = CONNECTION_ID()").Scan(&got)
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	var want string // MariaDB's name, then MySQL 8's
	err := db(t).QueryRowContext(ctx, "SELECT @@SESSION.tx_isolation").Scan(&want)
	if err != nil {
		err = db(t).QueryRowContext(ctx, "SELECT @@SESSION.transaction_isolation").Scan(&want)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := level(newStore(t, mysqlstore.Options{})); got != strings.ReplaceAll(want, "-", " ") {
		t.Errorf("the transaction ran at %q, want the session's %q", got, want)
	}
}

// lockWaits describes the server's transactions waiting for a lock, with their sessions'
// innodb_lock_wait_timeout, for a failure message.
func lockWaits(t *testing.T, d *sql.DB) string {
	rows, err := d.QueryContext(context.Background(), `SELECT t.trx_mysql_thread_id, t.trx_state, COALESCE(CAST(t.trx_wait_started AS CHAR), ''), CAST(NOW(6) AS CHAR),
		COALESCE(t.trx_query, ''), COALESCE(p.COMMAND, ''), COALESCE(p.STATE, ''), p.TIME_MS
		FROM information_schema.INNODB_TRX t LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id int64
		var state, started, now, query, cmd, pstate string
		var ms sql.NullFloat64
		if err := rows.Scan(&id, &state, &started, &now, &query, &cmd, &pstate, &ms); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "thread %d %s since %s (now %s) command %q state %q for %.0fms: %.200s\n", id, state, started, now, cmd, pstate, ms.Float64, query)
	}
	return b.String()
}
