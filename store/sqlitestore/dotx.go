package sqlitestore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strconv"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/txmode"
	"github.com/idemkit/idem/store/storekit"
)

// TxFunc is the caller's effect in DoTx: it writes through tx (and only tx) and returns the
// response to store and replay. It must not commit or roll back tx.
type TxFunc func(ctx context.Context, tx *sql.Tx) (idem.Response, error)

// DoTx runs fn at most once for key, in the same transaction as the claim and the completion:
// the strongest guarantee idem offers, for effects that live in this database file.
//
// It takes the store's writer connection, begins a write transaction on it (BEGIN
// IMMEDIATE: SQLite's single write lock, held from the start), claims key in it, runs fn with
// the transaction, stores fn's response in the record and commits: the caller's writes and the
// record commit together or not at all. A concurrent DoTx with the same key waits for the
// write lock until the first ends (in this process, for the writer connection; in another
// process sharing the file, up to Options.BusyTimeout), then replays its response; if the
// first rolled back, it claims the key and runs fn itself. No in-progress record is ever
// visible to others. A key this store has seen completed (see Options.KnownKeys) is answered
// from a reader connection, without the write lock.
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
//     for the write lock ended (the context's deadline, Options.BusyTimeout). If the failure
//     was in COMMIT the outcome is all or nothing: a retry with the same key replays or
//     executes, and never executes twice.
//
// A panic in fn rolls the transaction back and goes on. The stored response is replayed for
// Options.TxTTL; fn's response is always kept (return an error to keep nothing).
func (s *Store) DoTx(ctx context.Context, key, fingerprint string, fn TxFunc) (idem.Result, error) {
	return s.RunTx(ctx, idem.Call{Key: key, Fingerprint: fingerprint}, fn)
}

// RunTx is DoTx for a whole idem.Call: the record it claims also keeps the call's route and
// request for operators (`idem list`, `idem inspect`, the console), as an engine's does.
// DoTx is its short form, with neither.
func (s *Store) RunTx(ctx context.Context, call idem.Call, fn TxFunc) (idem.Result, error) {
	return txmode.DoTx(ctx, "sqlitestore", s.ready, txmode.Func[*sql.Tx](fn), func(fn txmode.Func[*sql.Tx]) (idem.Result, bool, error) {
		return s.doTx(ctx, call, fn, nil)
	})
}

// txWait bounds a TxRunner's wait for the write lock; a wait that ends by it or by the
// context's deadline is an *idem.InFlightError, not a store failure.
type txWait struct {
	// lock bounds the wait (for the writer connection and, across processes, SQLite's busy
	// timeout); 0: only the context's deadline, or Options.BusyTimeout across processes.
	lock time.Duration
}

// doTx is one attempt. SQLite's single write lock, taken at BEGIN, rules out deadlocks and
// serialization failures, so an attempt never asks to be retried.
func (s *Store) doTx(ctx context.Context, call idem.Call, fn txmode.Func[*sql.Tx], w *txWait) (res idem.Result, retry bool, err error) {
	key, fingerprint := call.Key, call.Fingerprint
	if err := idem.CheckKey(key); err != nil {
		return res, false, err
	}
	if !idem.ValidFingerprint(fingerprint) {
		return res, false, invalid("fingerprint %.80q is not %d lowercase hex digits", fingerprint, idem.FingerprintLen)
	}
	now := s.opt.Now()
	ttl := s.opt.TxTTL
	c := claim{key: key, fp: fingerprint, route: storekit.CleanRoute(call.Route), request: encodeRequest(call.Request), now: now.UnixMicro(), token: storekit.NextToken(0, now)}
	c.leaseUntil, c.expiresAt = c.now+ttl.Microseconds(), c.now+ttl.Microseconds()

	// A key this store has seen existing is looked up first, on a reader: a completed record,
	// or one an engine holds, is the answer as read, since a claim could not change it. Any
	// other key is most likely new, and the claim in the write transaction finds the record
	// anyway, so the look would only cost a query; unless most unknown keys of late existed
	// (see Reserve), and then they are looked up first too.
	// A request that waited for the writer while a duplicate completed its key looks again
	// before it begins, so a burst of duplicates replays from the readers instead of taking
	// the write lock one by one.
	first, known := s.known.lookFirst(key)
	looked := false
	look := func() (done bool, res idem.Result, err error) {
		looked = true
		rec, found, claimable, err := s.read(ctx, s.get, key, fingerprint, c.now, true)
		if err != nil {
			return true, res, s.storeErr("get", err)
		}
		if !known {
			s.known.learn(found && !claimable)
		}
		if found && !claimable {
			res, _, err = txmode.Answer(&rec, fingerprint, now)
			return true, res, err
		}
		return false, res, nil
	}
	if first {
		if done, res, err := look(); done {
			return res, false, err
		}
	}
	lookAgain := func() bool { return !looked && s.known.has(key) }
	tx, release, err := s.begin(ctx, w, lookAgain)
	if errors.Is(err, errLookAgain) {
		if done, res, err := look(); done {
			return res, false, err
		}
		tx, release, err = s.begin(ctx, w, nil)
	}
	if err != nil {
		if w != nil && s.waitEnded(ctx, err) {
			return res, false, txmode.WaitEnded(key)
		}
		return res, false, s.storeErr("begin", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
		release()
	}()
	r, err := s.claimIn(ctx, tx, &c)
	if err != nil {
		return res, false, s.storeErr("reserve", err)
	}
	if !known && !looked {
		s.known.learn(!r.Claimed)
	}
	if !r.Claimed {
		s.known.mark(key)
		return txmode.Answer(&r.Record, fingerprint, now)
	}
	resp, ferr := fn(ctx, tx)
	if ferr != nil {
		return res, false, ferr
	}
	expires := s.opt.Now().Add(ttl)
	if err := s.fenced(ctx, "complete", tx.StmtContext(ctx, s.complete), key, r.Record.Token,
		storekit.EncodeResponse(resp), s.opt.Now().UnixMicro(), expires.UnixMicro()); err != nil {
		return res, false, &idem.StoreError{Op: "complete", Err: err}
	}
	committed = true // Commit ends the transaction whatever its outcome
	if err := tx.Commit(); err != nil {
		return res, false, s.storeErr("commit", err)
	}
	s.known.mark(key)
	return idem.Result{Response: resp, Kept: true, Takeover: r.Takeover, ExpiresAt: time.UnixMicro(expires.UnixMicro())}, false, nil
}

// errLookAgain is begin's answer when lookAgain said so.
var errLookAgain = errors.New("look again before the write transaction")

// begin takes the writer connection and begins a write transaction on it, waiting at most
// w.lock (when w is set) and until ctx's deadline: for the connection, held by another
// transaction of this process, then for SQLite's write lock, held by another process. release
// gives the connection back, with its busy timeout restored, once the transaction ended.
// With lookAgain set, and true once the connection is taken, begin gives it back and returns
// errLookAgain instead.
func (s *Store) begin(ctx context.Context, w *txWait, lookAgain func() bool) (tx *sql.Tx, release func(), err error) {
	wctx := ctx
	if w != nil && w.lock > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, w.lock)
		defer cancel()
	}
	conn, err := s.w.Conn(wctx)
	if err != nil {
		return nil, nil, err
	}
	if lookAgain != nil && lookAgain() {
		_ = conn.Close()
		return nil, nil, errLookAgain
	}
	// The busy timeout bounds the wait for another process's write lock: make it end with
	// the wait, when that comes first.
	busy := s.opt.BusyTimeout
	if d, ok := wctx.Deadline(); ok && w != nil {
		busy = max(time.Millisecond, min(busy, time.Until(d)))
	}
	release = func() { _ = conn.Close() }
	if busy != s.opt.BusyTimeout {
		if err := setBusyTimeout(ctx, conn, busy); err != nil {
			release()
			return nil, nil, err
		}
		release = func() {
			// Detached: the connection must go back with the store's own setting, whatever
			// became of the caller's context; if this fails the connection is discarded.
			if err := setBusyTimeout(context.WithoutCancel(ctx), conn, s.opt.BusyTimeout); err != nil {
				_ = conn.Raw(func(any) error { return errors.Join(err, driver.ErrBadConn) })
			}
			_ = conn.Close()
		}
	}
	tx, err = conn.BeginTx(ctx, nil) // BEGIN IMMEDIATE (the writer's _txlock)
	if err != nil {
		release()
		return nil, nil, err
	}
	return tx, release, nil
}

func setBusyTimeout(ctx context.Context, conn *sql.Conn, d time.Duration) error {
	_, err := conn.ExecContext(ctx, "PRAGMA busy_timeout = "+strconv.FormatInt(d.Milliseconds(), 10))
	return err
}

// waitEnded reports a wait for the write lock that ran out: the context's deadline (or the
// TxRunner's bound on it), or SQLite's busy timeout.
func (s *Store) waitEnded(ctx context.Context, err error) bool {
	return isBusy(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded)
}

func (s *Store) storeErr(op string, err error) error {
	return &idem.StoreError{Op: op, Err: s.fail(op, err)}
}
