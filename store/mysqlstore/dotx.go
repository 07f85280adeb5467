package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/txmode"
)

// TxFunc is the caller's effect in DoTx: it writes through tx (and only tx) and returns the
// response to store and replay. It must not commit or roll back tx.
type TxFunc func(ctx context.Context, tx *sql.Tx) (idem.Response, error)

// DoTx runs fn at most once for key, in the same transaction as the claim and the completion:
// the strongest guarantee idem offers, for effects that live in this database.
//
// It begins a READ COMMITTED transaction, claims key in it, runs fn with the transaction,
// stores fn's response in the record and commits: the caller's writes and the record commit
// together or not at all. A concurrent DoTx with the same key waits on the records table's
// primary key until the first commits (at most the server's innodb_lock_wait_timeout, 50s by
// default), then replays its response; if the first rolls back, it claims the key and runs fn
// itself. No in-progress record is ever visible to others.
//
// DoTx returns:
//   - the executed Result (Kept true) and nil, after a successful commit;
//   - the replayed Result (Replayed true) and nil when the key was completed before with the
//     same fingerprint, by DoTx or by an engine on this store;
//   - an error matching idem.ErrMismatch when the key was used with another fingerprint;
//   - an *idem.InFlightError (idem.ErrInFlight) when an engine on this store, outside any
//     transaction, holds the key now;
//   - fn's error, unchanged, after rolling back: no record and none of fn's writes remain,
//     so a retry executes;
//   - an *idem.StoreError (idem.ErrStoreUnavailable) when the database failed, or the wait
//     for a concurrent transaction ran out (lock wait timeout, error 1205). If the failure
//     was in COMMIT the outcome is unknown to this process, but it is all or nothing: a retry
//     with the same key replays or executes, and never executes twice.
//
// Deadlocks (error 1213, after which InnoDB has rolled the whole transaction back) are
// retried a few times, fn included. A panic in fn rolls the transaction back and goes on.
// The stored response is replayed for Options.TxTTL; fn's response is always kept (return an
// error to keep nothing).
func (s *Store) DoTx(ctx context.Context, key, fingerprint string, fn TxFunc) (idem.Result, error) {
	if err := s.ready(ctx); err != nil {
		return idem.Result{}, err
	}
	if fn == nil {
		return idem.Result{}, invalid("nil function")
	}
	return txmode.Retry(func(fn txmode.Func[*sql.Tx]) (idem.Result, bool, error) {
		return s.doTx(ctx, key, fingerprint, fn, nil)
	}, txmode.Func[*sql.Tx](fn))
}

// txWait says how a TxRunner's attempt waits for a concurrent holder of its key.
type txWait struct {
	// lock bounds the wait on the holder's transaction; 0: only the context's deadline.
	lock time.Duration
}

// txExec runs the store's statements in tx, prepared once per connection like the Store's
// (doTx prepares them first).
type txExec struct {
	s  *Store
	tx *sql.Tx
}

func (e txExec) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := e.s.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return e.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
}

func (e txExec) queryRow(ctx context.Context, q string, args ...any) (*sql.Row, error) {
	st, err := e.s.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return e.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...), nil
}

// doTx is one attempt; retry reports a deadlock, after which a new attempt may pass. With w
// set, a wait for a concurrent holder that ends by w.lock or by ctx's deadline is an
// *idem.InFlightError, not a store failure.
func (s *Store) doTx(ctx context.Context, key, fingerprint string, fn txmode.Func[*sql.Tx], w *txWait) (res idem.Result, retry bool, err error) {
	if err := idem.CheckKey(key); err != nil {
		return res, false, err
	}
	// Prepare the statements before taking a connection: preparing one later would need a
	// second connection from the pool, which waiting duplicates may all hold.
	for _, q := range []string{s.q.lockingGet, s.q.insert, s.q.swap, s.q.complete} {
		if _, err := s.stmt(ctx, q); err != nil {
			return res, false, &idem.StoreError{Op: "begin", Err: opErr("prepare", err)}
		}
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return res, false, &idem.StoreError{Op: "begin", Err: opErr("begin", err)}
	}
	wctx := ctx // the claim's context: it bounds the wait for a concurrent holder
	if w != nil && w.lock > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, w.lock)
		defer cancel()
	}
	restore := false // the session's innodb_lock_wait_timeout is to be given back
	var tx *sql.Tx
	defer func() {
		if tx != nil {
			_ = tx.Rollback() // after Commit: sql.ErrTxDone, nothing done
		}
		if restore {
			// Detached: the connection must go back to the pool with its own setting, or not
			// at all.
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), restoreLockWait); err != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}
		_ = conn.Close()
	}()
	if d, ok := wctx.Deadline(); ok && w != nil {
		// The server ends its side of the wait too, at most a second after the client gave
		// up (innodb_lock_wait_timeout counts whole seconds), instead of 50s later.
		secs := max(1, int64((time.Until(d)+time.Second-1)/time.Second))
		restore = true
		if _, err := conn.ExecContext(ctx, setLockWait+strconv.FormatInt(secs, 10)); err != nil {
			return res, false, &idem.StoreError{Op: "begin", Err: opErr("begin", err)}
		}
	}
	tx, err = conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return res, false, &idem.StoreError{Op: "begin", Err: opErr("begin", err)}
	}
	now := s.opt.Now().Truncate(time.Microsecond)
	ttl := s.opt.TxTTL
	r, err := s.reserve(wctx, txExec{s, tx}, true, key, fingerprint, now, ttl, ttl)
	if err == nil && r.Claimed && restore {
		if _, err = tx.ExecContext(ctx, restoreLockWait); err == nil {
			restore = false
		}
	}
	if err != nil {
		if errors.Is(err, idem.ErrInvalidInput) {
			return res, false, err
		}
		if w != nil && waitEnded(ctx, err) {
			return res, false, txmode.WaitEnded(key)
		}
		return res, retryable(err), &idem.StoreError{Op: "reserve", Err: opErr("reserve", err)}
	}
	if !r.Claimed {
		return txmode.Answer(&r.Record, fingerprint, now)
	}
	resp, ferr := fn(ctx, tx)
	if ferr != nil {
		return res, retryable(ferr) && ctx.Err() == nil, ferr
	}
	expires := s.opt.Now().Add(ttl)
	if err := changedOne(txExec{s, tx}.exec(ctx, s.q.complete, idem.EncodeResponse(resp), s.opt.Now().UnixMicro(), expires.UnixMicro(), key, r.Record.Token)); err != nil {
		return res, retryable(err), &idem.StoreError{Op: "complete", Err: opErr("complete", err)}
	}
	err = tx.Commit()
	tx = nil // Commit ends the transaction whatever its outcome
	if err != nil {
		return res, retryable(err), &idem.StoreError{Op: "commit", Err: opErr("commit", err)}
	}
	return idem.Result{Response: resp, Kept: true, Takeover: r.Takeover, ExpiresAt: time.UnixMicro(expires.UnixMicro())}, false, nil
}

// The session's lock wait bound, set for a TxRunner's claim and given back after it. The
// server's setting counts whole seconds; the claim's context ends the wait on time.
const (
	setLockWait     = "SET @idem_lock_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = "
	restoreLockWait = "SET SESSION innodb_lock_wait_timeout = @idem_lock_wait"
)

// waitEnded reports a claim whose wait for a concurrent holder ran out: the server's lock wait
// timeout (1205), or the claim's or the caller's deadline.
func waitEnded(ctx context.Context, err error) bool {
	return isMySQLError(err, errLockWait) || errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded)
}

// retryable reports a transaction InnoDB rolled back as a deadlock victim (1213): nothing of
// it committed, and a new attempt may pass.
func retryable(err error) bool { return isMySQLError(err, errDeadlock) }
