package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/txmode"
	"github.com/idemkit/idem/store/storekit"
)

// TxFunc is the caller's effect in DoTx: it writes through tx (and only tx) and returns the
// response to store and replay. It must not commit or roll back tx.
type TxFunc func(ctx context.Context, tx pgx.Tx) (idem.Response, error)

// DoTx runs fn at most once for key, in the same transaction as the claim and the completion:
// the strongest guarantee idem offers, for effects that live in this database.
//
// It begins a READ COMMITTED transaction, claims key in it, runs fn with the transaction,
// stores fn's response in the record and commits: the caller's writes and the record commit
// together or not at all. A concurrent DoTx with the same key waits on the records table's
// unique index until the first commits, then replays its response; if the first rolls back,
// it claims the key and runs fn itself. No in-progress record is ever visible to others.
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
//   - an *idem.StoreError (idem.ErrStoreUnavailable) when the database failed. If the
//     failure was in COMMIT the outcome is unknown to this process, but it is all or nothing:
//     a retry with the same key replays or executes, and never executes twice.
//
// Serialization failures and deadlocks roll back everything and are retried a few times.
// The stored response is replayed for Options.TxTTL from the claim; fn's response is always
// kept (return an error to keep nothing).
func (s *Store) DoTx(ctx context.Context, key, fingerprint string, fn TxFunc) (idem.Result, error) {
	return s.RunTx(ctx, idem.Call{Key: key, Fingerprint: fingerprint}, fn)
}

// RunTx is DoTx for a whole idem.Call: the record it claims also keeps the call's route and
// request for operators (`idem list`, `idem inspect`, the console), as an engine's does.
// DoTx is its short form, with neither.
func (s *Store) RunTx(ctx context.Context, call idem.Call, fn TxFunc) (idem.Result, error) {
	return txmode.DoTx(ctx, "pgstore", s.ready, txmode.Func[pgx.Tx](fn), func(fn txmode.Func[pgx.Tx]) (idem.Result, bool, error) {
		return s.doTx(ctx, call, fn, nil)
	})
}

// txWait says how a TxRunner's attempt waits for a concurrent holder of its key.
type txWait struct {
	// lock bounds the wait on the holder's transaction (PostgreSQL's lock_timeout); 0: none.
	lock time.Duration
}

// doTx is one attempt; retry reports an abort that a new attempt may get past. With w set, a
// wait for a concurrent holder that ends by w.lock or by ctx's deadline is an
// *idem.InFlightError, not a store failure.
//
// A new key costs the round trips fn's own transaction would: BEGIN and the claim (one
// INSERT that bounds its own wait) pipelined in one; fn's statements; the completion and
// COMMIT pipelined in one. A key that has a row (a replay, a takeover) takes a second round
// trip for its claim.
func (s *Store) doTx(ctx context.Context, call idem.Call, fn txmode.Func[pgx.Tx], w *txWait) (res idem.Result, retry bool, err error) {
	key, fingerprint := call.Key, call.Fingerprint
	now := s.opt.Now()
	ttl := s.opt.TxTTL
	args, err := reserveArgs(idem.ReserveRequest{Key: key, Fingerprint: fingerprint, Route: call.Route, Request: call.Request,
		Now: now, Lease: ttl, TTL: ttl})
	if err != nil {
		return res, false, err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, false, &idem.StoreError{Op: "begin", Err: opErr("begin", err)}
	}
	defer func() {
		// Whatever ended the attempt, the transaction must not stay open on the connection.
		// Detached: a cancelled caller must not leave it open either. Rollback of a dead
		// connection closes it, and Release destroys a connection left in a transaction.
		if conn.Conn().PgConn().TxStatus() != 'I' && !conn.Conn().IsClosed() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
			_, _ = conn.Exec(rctx, "rollback")
			cancel()
		}
		conn.Release()
	}()
	var lock string
	if w != nil && w.lock > 0 {
		lock = fmt.Sprintf("%dms", max(1, w.lock.Milliseconds()))
	}
	tx, r, err := s.beginClaim(ctx, conn.Conn(), args, lock)
	if err != nil {
		var se *idem.StoreError
		switch {
		case errors.Is(err, idem.ErrInvalidInput), errors.As(err, &se):
			return res, false, err
		case w != nil && waitEnded(ctx, err):
			return res, false, txmode.WaitEnded(key)
		}
		return res, retryable(err), &idem.StoreError{Op: "reserve", Err: opErr("reserve", err)}
	}
	if !r.Claimed {
		return txmode.Answer(&r.Record, fingerprint, now)
	}
	resp, ferr := fn(ctx, tx)
	if ferr != nil {
		if retryable(ferr) && ctx.Err() == nil {
			return res, true, ferr
		}
		return res, false, ferr
	}
	// The record expires TxTTL after the claim: the claim wrote that expires_at already, and
	// an UPDATE that leaves every indexed column as it was is a HOT update, which writes no
	// index entry (the claim's row is the transaction's own, so there is room beside it).
	expires := now.Add(ttl)
	b := &pgx.Batch{}
	b.Queue(s.q.complete, completeArgs(key, r.Record.Token, resp, now, expires)...)
	b.Queue("commit")
	br := tx.SendBatch(ctx, b)
	tag, err := br.Exec()
	if err = fenced(tag, err); err != nil {
		_ = br.Close()
		return res, retryable(err), &idem.StoreError{Op: "complete", Err: opErr("complete", err)}
	}
	tag, err = br.Exec()
	if err = cmp.Or(err, br.Close()); err == nil && tag.String() == "ROLLBACK" {
		err = pgx.ErrTxCommitRollback
	}
	if err != nil {
		return res, retryable(err), &idem.StoreError{Op: "commit", Err: opErr("commit", err)}
	}
	return idem.Result{Response: resp, Kept: true, Takeover: r.Takeover, ExpiresAt: expires.Truncate(time.Microsecond)}, false, nil
}

// beginClaim begins a READ COMMITTED transaction on conn and claims the key in it. On the
// plain layout BEGIN and the claim of a new key share one round trip; a key that has a row
// takes a second one. A failed claim returns the database's error, for doTx to tell a
// bounded wait from a failure.
func (s *Store) beginClaim(ctx context.Context, conn *pgx.Conn, args []any, lock string) (pgx.Tx, idem.Reservation, error) {
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	if s.part != nil {
		tx, err := conn.BeginTx(ctx, opts)
		if err != nil {
			return nil, idem.Reservation{}, &idem.StoreError{Op: "begin", Err: opErr("begin", err)}
		}
		r, err := s.claimTx(ctx, tx, args, lock)
		return tx, r, err
	}
	key := args[0].(string)
	b := &pgx.Batch{}
	b.BeginTx(opts)
	if lock == "" {
		b.Queue(s.q.claimNew, args...)
	} else {
		b.Queue(s.q.claimNewBounded, append(args[:len(args):len(args)], lock)...)
	}
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	if _, err := br.Exec(); err != nil {
		// The server sends BEGIN's answer with the claim's, so a claim that waited past the
		// deadline fails here too: the error goes to doTx as the claim's.
		_ = br.Close()
		return nil, idem.Reservation{}, err
	}
	tag, err := br.Exec()
	if err = cmp.Or(err, br.Close()); err != nil {
		return tx, idem.Reservation{}, err
	}
	if tag.RowsAffected() == 1 {
		return tx, newClaim(args), nil
	}
	// The key has a row: the full claim, in the transaction, replays it, takes it over or
	// reports it in flight. lock_timeout is still set from the first try.
	b = &pgx.Batch{}
	queueClaim(b, s.q.reserve, args, lock, false)
	r, again, err := readClaim(tx.SendBatch(ctx, b), key, lock, false)
	if err != nil || !again {
		return tx, r, err
	}
	r, err = s.claimTx(ctx, tx, args, lock)
	return tx, r, err
}

// newClaim is the reservation claimNew made: the record its arguments (from reserveArgs)
// describe, claimed for the first time.
func newClaim(args []any) idem.Reservation {
	var req *idem.Request
	if b := args[7].([]byte); b != nil {
		r, _ := storekit.DecodeRequest(b) // encoded by reserveArgs: it decodes
		req = &r
	}
	return idem.Reservation{Claimed: true, Record: idem.Record{
		Request:     req,
		Key:         args[0].(string),
		Fingerprint: args[1].(string),
		State:       idem.StateInProgress,
		Token:       args[5].(int64),
		LeaseUntil:  time.UnixMicro(args[3].(int64)),
		Attempts:    1,
		Starts:      1,
		CreatedAt:   time.UnixMicro(args[2].(int64)),
		ExpiresAt:   time.UnixMicro(args[4].(int64)),
		Route:       args[6].(string),
	}}
}

// claimTx runs the claim statement in tx. With lock set, the claim's wait for a concurrent
// holder is bounded by that lock_timeout, and the setting given back to the caller's
// statements right after: all three statements pipelined in one round trip.
func (s *Store) claimTx(ctx context.Context, tx pgx.Tx, args []any, lock string) (idem.Reservation, error) {
	if s.part != nil {
		// The partitioned layout's claim is a batch of its own: the setting goes around it.
		var prev string
		if lock != "" {
			if err := tx.QueryRow(ctx, `SELECT current_setting('lock_timeout'), set_config('lock_timeout', $1, true)`,
				lock).Scan(&prev, new(string)); err != nil {
				return idem.Reservation{}, err
			}
		}
		r, err := s.reserve(ctx, tx, args)
		if err == nil && lock != "" {
			_, err = tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, prev)
		}
		return r, err
	}
	key := args[0].(string)
	for range reserveRetries {
		b := &pgx.Batch{}
		queueClaim(b, s.q.reserve, args, lock, true)
		r, again, err := readClaim(tx.SendBatch(ctx, b), key, lock, true)
		if err != nil || !again {
			return r, err
		}
		// The blocking row is not in this statement's snapshot: run it again.
	}
	return idem.Reservation{}, errNeither(key)
}

// queueClaim queues the claim statement. With lock set, lock_timeout is set to lock around
// it and the previous setting given back after it; set false: lock_timeout is lock already
// and the previous setting saved.
func queueClaim(b *pgx.Batch, reserve string, args []any, lock string, set bool) {
	if lock != "" && set {
		b.Queue(`SELECT set_config('idem.lock_timeout', current_setting('lock_timeout'), true), set_config('lock_timeout', $1, true)`, lock)
	}
	b.Queue(reserve, args...)
	if lock != "" {
		b.Queue(`SELECT set_config('lock_timeout', current_setting('idem.lock_timeout'), true)`)
	}
}

// readClaim reads what queueClaim queued from br and closes it; again reports a claim that
// found neither a claim nor a record, to run again.
func readClaim(br pgx.BatchResults, key, lock string, set bool) (res idem.Reservation, again bool, err error) {
	var restore, rErr error
	if lock != "" && set {
		_, err = br.Exec()
	}
	if err == nil {
		again, rErr, err = scanReservation(br.QueryRow(), key, &res)
	}
	if err == nil && lock != "" {
		_, restore = br.Exec()
	}
	if err = cmp.Or(err, restore, br.Close(), rErr); err != nil {
		return idem.Reservation{}, false, err
	}
	return res, again, nil
}

// waitEnded reports a claim that failed because its wait for a concurrent holder ran out:
// lock_not_available (55P03) from lock_timeout, or the caller's deadline.
func waitEnded(ctx context.Context, err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded)
}

// retryable reports a transaction PostgreSQL aborted and that may pass when run again:
// serialization_failure (40001) and deadlock_detected (40P01).
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
