package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	idemretry "github.com/idemkit/idem/internal/retry"
	"github.com/idemkit/idem/store/internal/txmode"
	"github.com/idemkit/idem/store/storekit"
)

// TxFunc is the caller's effect in DoTx: it writes through tx (and only tx) and returns the
// response to store and replay. It must not commit or roll back tx.
type TxFunc func(ctx context.Context, tx *sql.Tx) (idem.Response, error)

// DoTx runs fn at most once for key, in the same transaction as the claim and the completion:
// the strongest guarantee idem offers, for effects that live in this database.
//
// It begins a transaction (at the session's isolation level), claims
// key in it, runs fn with the transaction, stores fn's response in the record and commits:
// the caller's writes and the record commit together or not at all. A concurrent DoTx with
// the same key waits on the records table's primary key until the first commits (at most the
// server's innodb_lock_wait_timeout, 50s by default), then replays its response; if the first
// rolls back, it claims the key and runs fn itself. No in-progress record is ever visible to
// others.
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
	return s.RunTx(ctx, idem.Call{Key: key, Fingerprint: fingerprint}, fn)
}

// RunTx is DoTx for a whole idem.Call: the record it claims also keeps the call's route and
// request for operators (`idem list`, `idem inspect`, the console), as an engine's does.
// DoTx is its short form, with neither.
func (s *Store) RunTx(ctx context.Context, call idem.Call, fn TxFunc) (idem.Result, error) {
	return txmode.DoTx(ctx, "mysqlstore", s.ready, txmode.Func[*sql.Tx](fn), func(fn txmode.Func[*sql.Tx]) (idem.Result, bool, error) {
		return s.doTx(ctx, call, fn, nil)
	})
}

// txWait says how a TxRunner's attempt waits for a concurrent holder of its key.
type txWait struct {
	// lock bounds the wait on the holder's transaction; 0: only the context's deadline.
	lock time.Duration
}

// txExec runs the store's statements in tx, prepared once per connection like the Store's
// (doTx prepares them first). With wait zero or more, it sends them as text instead, each
// bounded on the server to wait seconds for a lock (0: not at all): SET STATEMENT
// innodb_lock_wait_timeout = wait FOR the statement with its arguments written in as literals
// (MariaDB's syntax; see doTx for MySQL). With wait negative the session's setting applies.
type txExec struct {
	s    *Store
	tx   *sql.Tx
	wait int64
}

// sessionWait is a txExec's wait that leaves the bound to the session's setting.
const sessionWait = -1

func (e txExec) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if e.wait >= 0 {
		return e.tx.ExecContext(ctx, bounded(e.wait, q, args))
	}
	st, err := e.s.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return e.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
}

func (e txExec) queryRow(ctx context.Context, q string, args ...any) (*sql.Row, error) {
	if e.wait >= 0 {
		return e.tx.QueryRowContext(ctx, bounded(e.wait, q, args)), nil
	}
	st, err := e.s.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return e.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...), nil
}

// bounded writes q, one of the store's statements, as text with its placeholders replaced by
// args, behind a SET STATEMENT that bounds its lock wait to secs seconds. Only the store's own
// statements pass here: table names are checked names, and their only '?' are placeholders.
// Strings (keys and fingerprints) and byte slices (an encoded request; nil is NULL) become
// hexadecimal literals, byte for byte, so no quoting or character set is involved; integers
// are decimal.
func bounded(secs int64, q string, args []any) string {
	b := make([]byte, 0, len(q)+64+32*len(args))
	b = append(b, "SET STATEMENT innodb_lock_wait_timeout = "...)
	b = strconv.AppendInt(b, secs, 10)
	b = append(b, " FOR "...)
	for i := 0; i < len(q); i++ {
		if q[i] != '?' || len(args) == 0 {
			b = append(b, q[i])
			continue
		}
		switch v := args[0].(type) {
		case string:
			b = append(b, "X'"...)
			b = hex.AppendEncode(b, []byte(v))
			b = append(b, '\'')
		case []byte: // an encoded request; nil is NULL
			if v == nil {
				b = append(b, "NULL"...)
				break
			}
			b = append(b, "X'"...)
			b = hex.AppendEncode(b, v)
			b = append(b, '\'')
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		default:
			panic(fmt.Sprintf("mysqlstore: no literal for %T", v)) // the store's own arguments only
		}
		args = args[1:]
	}
	return string(b)
}

// doTx is one attempt; retry reports a deadlock, after which a new attempt may pass. With w
// set, a wait for a concurrent holder that ends by w.lock or by ctx's deadline is an
// *idem.InFlightError, not a store failure.
//
// A new key costs two round trips more than fn's own transaction at the session's isolation
// level: START TRANSACTION; the claim (one INSERT, with the wait bound in it on MariaDB);
// fn's statements; the completion (one UPDATE); COMMIT. The driver sends START TRANSACTION
// and COMMIT for the *sql.Tx on their own, and fn must run between the claim and the
// completion, so no statement of the store can share a round trip with them.
func (s *Store) doTx(ctx context.Context, call idem.Call, fn txmode.Func[*sql.Tx], w *txWait) (res idem.Result, retry bool, err error) {
	key, fingerprint := call.Key, call.Fingerprint
	if err := checkClaim(key, fingerprint); err != nil {
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
	var lw lockWait
	var tx *sql.Tx
	defer func() {
		if tx != nil {
			_ = tx.Rollback() // after Commit: sql.ErrTxDone, nothing done
		}
		if lw.restore {
			// Detached: the connection must go back to the pool with its own setting, or not
			// at all.
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), restoreLockWait); err != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}
		_ = conn.Close()
	}()
	if lw, err = s.boundLockWait(ctx, wctx, conn, w); err != nil {
		return res, false, &idem.StoreError{Op: "begin", Err: opErr("begin", err)}
	}
	tx, err = conn.BeginTx(ctx, nil)
	if err != nil {
		return res, false, &idem.StoreError{Op: "begin", Err: opErr("begin", err)}
	}
	now := s.opt.Now().Truncate(time.Microsecond)
	ttl := s.opt.TxTTL
	route := storekit.CleanRoute(call.Route)
	request := call.Request.Clone()
	r, err := s.claimWaiting(ctx, wctx, tx, &lw, key, fingerprint, route, request, now, ttl)
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
	return s.runClaimed(ctx, tx, key, r, fn, ttl)
}

// lockWait is how a claim waits for a concurrent holder of its key, as boundLockWait set it.
type lockWait struct {
	// wait is the claim's txExec wait: the bound sent with each statement (MariaDB), or
	// sessionWait.
	wait int64
	// poll: the claim is tried again until the claim's context ends, each try without a wait.
	poll bool
	// restore: the session's innodb_lock_wait_timeout was changed (MySQL) and is to be given
	// back, in the transaction once the key is claimed, or on the connection at the end.
	restore bool
}

// boundLockWait sets how the claim on conn waits for a concurrent holder: without w or a
// deadline on wctx, by the session's setting; otherwise by the server's bound on lock waits,
// in whole seconds (the only unit innodb_lock_wait_timeout has), ending lockWaitMargin before
// wctx does. The server's bound must end the wait before the claim's context does: a client
// that gives up first closes its connection, and MariaDB then goes on waiting for the lock,
// past its own timeout, until the holder's transaction ends. On an error, lw.restore still
// says whether the session's setting may have changed.
func (s *Store) boundLockWait(ctx, wctx context.Context, conn *sql.Conn, w *txWait) (lw lockWait, err error) {
	lw.wait = sessionWait
	d, ok := wctx.Deadline()
	if !ok || w == nil {
		return lw, nil
	}
	lw.wait = int64((time.Until(d) - lockWaitMargin) / time.Second)
	maria, err := s.mariaDB(ctx, conn)
	if err != nil {
		return lw, err
	}
	switch {
	case lw.wait < 1 && maria:
		lw.wait, lw.poll = 0, true
	case lw.wait < 1:
		lw.wait = 1 // MySQL's least: a client that gives up first leaves the server waiting
	}
	if !maria {
		// MySQL has no per-statement setting for it (SET_VAR takes no InnoDB variable): the
		// session's is set for the claim and given back after it.
		lw.restore = true
		if _, err := conn.ExecContext(ctx, setLockWait+strconv.FormatInt(lw.wait, 10)); err != nil {
			return lw, err
		}
		lw.wait = sessionWait
	}
	return lw, nil
}

// claimWaiting claims key in tx, waiting for a concurrent holder as lw says (bounded by
// wctx), and gives the session's lock wait setting back in tx once the key is claimed.
func (s *Store) claimWaiting(ctx, wctx context.Context, tx *sql.Tx, lw *lockWait, key, fingerprint, route string, request *idem.Request, now time.Time, ttl time.Duration) (idem.Reservation, error) {
	r, err := s.claimTx(wctx, txExec{s, tx, lw.wait}, key, fingerprint, route, request, now, ttl)
	for pause := 10 * time.Millisecond; lw.poll && isMySQLError(err, errLockWait); pause = min(2*pause, 200*time.Millisecond) {
		// Only the statement was rolled back: the transaction goes on, and the claim is
		// tried again in it.
		if idemretry.Sleep(wctx, pause) != nil {
			break
		}
		r, err = s.claimTx(wctx, txExec{s, tx, lw.wait}, key, fingerprint, route, request, now, ttl)
	}
	if err == nil && r.Claimed && lw.restore {
		if _, err = tx.ExecContext(ctx, restoreLockWait); err == nil {
			lw.restore = false
		}
	}
	return r, err
}

// runClaimed runs fn in tx, where key is claimed as r, stores fn's response in the record and
// commits. tx is done when it returns (committed, or to be rolled back by the caller).
func (s *Store) runClaimed(ctx context.Context, tx *sql.Tx, key string, r idem.Reservation, fn txmode.Func[*sql.Tx], ttl time.Duration) (res idem.Result, retry bool, err error) {
	resp, ferr := fn(ctx, tx)
	if ferr != nil {
		return res, retryable(ferr) && ctx.Err() == nil, ferr
	}
	expires := s.opt.Now().Add(ttl)
	if err := changedOne(txExec{s: s, tx: tx, wait: sessionWait}.exec(ctx, s.q.complete, storekit.EncodeResponse(resp), s.opt.Now().UnixMicro(), expires.UnixMicro(), key, r.Record.Token)); err != nil {
		return res, retryable(err), &idem.StoreError{Op: "complete", Err: opErr("complete", err)}
	}
	// Commit ends the transaction whatever its outcome: the caller's Rollback after it is a
	// no-op (sql.ErrTxDone).
	if err := tx.Commit(); err != nil {
		return res, retryable(err), &idem.StoreError{Op: "commit", Err: opErr("commit", err)}
	}
	return idem.Result{Response: resp, Kept: true, Takeover: r.Takeover, ExpiresAt: time.UnixMicro(expires.UnixMicro())}, false, nil
}

// checkClaim checks a claim's key and fingerprint.
func checkClaim(key, fingerprint string) error {
	if err := idem.CheckKey(key); err != nil {
		return err
	}
	if !idem.ValidFingerprint(fingerprint) {
		return invalid("fingerprint %.80q is not %d lowercase hex digits", fingerprint, idem.FingerprintLen)
	}
	return nil
}

// claimTx claims key in e's transaction, INSERT first: a new key is one statement, which
// takes the row's exclusive lock until the transaction ends. When the row exists, the INSERT
// waits for a transaction that inserted or claimed it to end and then fails as a duplicate
// (1062), keeping a shared lock on the row; the locking read that follows sees its latest
// committed version, and a record that can be claimed (expired, released, or a stale lease
// with the same fingerprint) is taken over by the compare-and-swap UPDATE of Reserve. If the
// holder rolled back its insert instead, the INSERT passes. A deadlock (InnoDB rolled the
// transaction back) is returned, for the caller to retry the attempt.
func (s *Store) claimTx(ctx context.Context, e txExec, key, fingerprint, route string, request *idem.Request, now time.Time, ttl time.Duration) (idem.Reservation, error) {
	claim := idem.Record{
		Key: key, Fingerprint: fingerprint, State: idem.StateInProgress, Attempts: 1, Starts: 1,
		LeaseUntil: now.Add(ttl).Truncate(time.Microsecond), CreatedAt: now,
		ExpiresAt: now.Add(ttl).Truncate(time.Microsecond),
		Token:     storekit.NextToken(0, now),
		Route:     route,
		Request:   request,
	}
	for range reserveRetries {
		_, err := e.exec(ctx, s.q.insert, key, fingerprint, claim.Token, claim.LeaseUntil.UnixMicro(),
			now.UnixMicro(), claim.ExpiresAt.UnixMicro(), claim.Route, encodeRequest(claim.Request))
		if err == nil {
			return idem.Reservation{Claimed: true, Record: claim}, nil
		}
		if !isMySQLError(err, errDupEntry) {
			return idem.Reservation{}, err
		}
		old, err := s.get(ctx, e, s.q.lockingGet, key)
		switch {
		case errors.Is(err, idem.ErrNotFound):
			continue // deleted meanwhile (Delete, or Sweep of an expired record): insert again
		case err != nil:
			return idem.Reservation{}, err
		}
		res, done, err := s.swapClaim(ctx, e, claim, old, now)
		if err != nil || done {
			return res, err
		}
	}
	return idem.Reservation{}, fmt.Errorf("claim of %.80q lost %d races in a row", key, reserveRetries)
}

// Servers, for Store.server.
const (
	serverUnknown = iota
	serverMariaDB
	serverMySQL
)

// mariaDB reports whether the server is MariaDB, asking it on conn the first time.
func (s *Store) mariaDB(ctx context.Context, conn *sql.Conn) (bool, error) {
	switch s.server.Load() {
	case serverMariaDB:
		return true, nil
	case serverMySQL:
		return false, nil
	}
	var v string
	if err := conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return false, err
	}
	server := int32(serverMySQL)
	if strings.Contains(v, "MariaDB") {
		server = serverMariaDB
	}
	s.server.CompareAndSwap(serverUnknown, server)
	return server == serverMariaDB, nil
}

// lockWaitMargin is how long before the claim's context ends the server's bound on its lock
// wait ends, so that the server's lock wait timeout (error 1205) ends the wait, not the
// client.
const lockWaitMargin = 250 * time.Millisecond

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
