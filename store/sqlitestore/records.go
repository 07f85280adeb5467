package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// Reserve implements idem.Store.
//
// The claim is always one statement, an upsert on the writer (INSERT … ON CONFLICT DO UPDATE …
// WHERE expired or stale … RETURNING): it either claims or writes nothing. Around it, two
// looks without the write lock save time:
//
//   - For a key this Store has seen existing (Options.KnownKeys), Reserve first reads the
//     record on a reader connection. If it is one Reserve returns untouched (completed and not
//     expired; in progress with a live lease; another fingerprint and not expired), that
//     snapshot is the answer: the record was in that state at that instant, and a claim could
//     not have changed it. Replays and in-flight duplicates never wait for the writer.
//   - For other keys, most likely new, Reserve claims at once. If the upsert does not fire,
//     the record is read on a reader and returned under the same rule. When most of the
//     unknown keys of late turned out to exist (after a restart, or with more live keys than
//     Options.KnownKeys), Reserve reads those first too, so that replays do not queue for
//     the writer.
//
// When the read shows a record that could be claimed after all (it changed in between), the
// upsert is tried again in a write transaction and, if it still does not fire, the existing
// record is read in that same transaction. The upsert stores the route too.
func (s *Store) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	if err := s.ready(ctx); err != nil {
		return idem.Reservation{}, err
	}
	key := req.Key
	if err := idem.CheckKey(key); err != nil {
		return idem.Reservation{}, err
	}
	if req.Lease <= 0 || req.TTL <= 0 {
		return idem.Reservation{}, invalid("lease %s and TTL %s must be positive", req.Lease, req.TTL)
	}
	c := claim{key: key, fp: req.Fingerprint, route: storekit.CleanRoute(req.Route), request: encodeRequest(req.Request), now: req.Now.UnixMicro(), token: storekit.NextToken(0, req.Now)}
	c.leaseUntil, c.expiresAt = c.now+req.Lease.Microseconds(), c.now+req.TTL.Microseconds()
	res, err := s.reserve(ctx, &c)
	if err != nil {
		return idem.Reservation{}, s.fail("reserve", err)
	}
	s.known.mark(key)
	return res, nil
}

func (s *Store) reserve(ctx context.Context, c *claim) (idem.Reservation, error) {
	look, known := s.known.lookFirst(c.key)
	looked := false
	if look {
		rec, found, claimable, err := s.read(ctx, s.get, c.key, c.fp, c.now, true)
		if err != nil {
			return idem.Reservation{}, err
		}
		if !known {
			s.known.learn(found && !claimable)
		}
		if found && !claimable {
			return idem.Reservation{Record: rec}, nil
		}
		looked = true
	}
	res, err := c.try(ctx, s.upsert)
	if err != nil {
		return res, err
	}
	if !known && !looked {
		s.known.learn(!res.Claimed)
	}
	if res.Claimed {
		return res, nil
	}
	if !looked {
		rec, found, claimable, err := s.read(ctx, s.get, c.key, c.fp, c.now, true)
		if err != nil || found && !claimable {
			return idem.Reservation{Record: rec}, err
		}
	}
	return s.reserveTx(ctx, c)
}

// reserveTx claims, or reads the record that prevents the claim, in one write transaction.
func (s *Store) reserveTx(ctx context.Context, c *claim) (_ idem.Reservation, err error) {
	tx, err := s.w.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock from the start
	if err != nil {
		return idem.Reservation{}, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	res, err := s.claimIn(ctx, tx, c)
	if err != nil {
		return idem.Reservation{}, err
	}
	return res, tx.Commit()
}

// claimIn runs the upsert in tx and, if it does not fire, reads the record that prevents it.
func (s *Store) claimIn(ctx context.Context, tx *sql.Tx, c *claim) (idem.Reservation, error) {
	res, err := c.try(ctx, tx.StmtContext(ctx, s.upsert))
	if err != nil || res.Claimed {
		return res, err
	}
	var found bool
	res.Record, found, _, err = s.read(ctx, tx.StmtContext(ctx, s.wget), c.key, c.fp, c.now, false)
	if err != nil {
		return idem.Reservation{}, err
	}
	if !found {
		// The upsert neither inserted nor updated, so the row exists in this transaction.
		return idem.Reservation{}, errors.New("upsert did not fire but the record is absent")
	}
	return res, nil
}

// claim holds the arguments of one upsert, in Unix microseconds.
type claim struct {
	key, fp, route                    string
	request                           []byte // the encoded request; nil for none (NULL)
	now, token, leaseUntil, expiresAt int64
}

// encodeRequest returns the encoding of r a claim stores, nil (NULL) for none.
func encodeRequest(r *idem.Request) []byte {
	if r == nil {
		return nil
	}
	return storekit.EncodeRequest(*r)
}

// decodeRequest decodes a stored request column: nil for NULL.
func decodeRequest(b []byte) (*idem.Request, error) {
	if b == nil {
		return nil, nil
	}
	r, err := storekit.DecodeRequest(b)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// try runs the upsert. It returns a Reservation with Claimed false when the upsert did not fire.
func (c *claim) try(ctx context.Context, upsert *sql.Stmt) (idem.Reservation, error) {
	var token, attempts, created, starts int64
	route := c.route
	var stored []byte
	err := upsert.QueryRowContext(ctx, c.key, c.fp, c.token, c.leaseUntil, c.now, c.expiresAt, c.route, c.request).Scan(&token, &attempts, &created, &route, &starts, &stored)
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Reservation{}, nil
	}
	if err != nil {
		return idem.Reservation{}, err
	}
	request, err := decodeRequest(stored)
	if err != nil {
		return idem.Reservation{}, err
	}
	return idem.Reservation{
		Claimed:  true,
		Takeover: attempts > 1,
		Record: idem.Record{
			Key:         c.key,
			Fingerprint: c.fp,
			State:       idem.StateInProgress,
			Token:       token,
			LeaseUntil:  time.UnixMicro(c.leaseUntil),
			Attempts:    int(attempts),
			Starts:      int(starts),
			CreatedAt:   time.UnixMicro(created),
			ExpiresAt:   time.UnixMicro(c.expiresAt),
			Route:       route,
			Request:     request,
		},
	}, nil
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.fenced(ctx, "complete", s.complete, key, token, storekit.EncodeResponse(resp), now.UnixMicro(), expiresAt.UnixMicro())
}

// Release implements idem.Store. The record is kept, expired since the epoch, so that the next
// claim's token is larger than the released one.
func (s *Store) Release(ctx context.Context, key string, token int64) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.fenced(ctx, "release", s.release, key, token)
}

// Extend implements idem.Store.
func (s *Store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return s.fenced(ctx, "extend", s.extend, key, token, until.UnixMicro())
}

// fenced runs an update guarded by the held clause and reports ErrLeaseLost if it changed no row.
func (s *Store) fenced(ctx context.Context, op string, stmt *sql.Stmt, key string, token int64, args ...any) error {
	r, err := stmt.ExecContext(ctx, append([]any{key, token}, args...)...)
	if err != nil {
		return s.fail(op, err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return s.fail(op, err)
	}
	if n == 0 {
		return idem.ErrLeaseLost
	}
	return nil
}

// Get implements idem.Store. A released record is returned with ExpiresAt at the Unix epoch.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := s.ready(ctx); err != nil {
		return idem.Record{}, err
	}
	rec, found, _, err := s.read(ctx, s.get, key, "", 0, false)
	if err != nil {
		return idem.Record{}, s.fail("get", err)
	}
	if !found {
		return idem.Record{}, idem.ErrNotFound
	}
	return rec, nil
}

// Delete removes key's record whatever its state (idem.Deleter), for operators. A deleted
// completed record lets its key execute again. Deleting a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if _, err := s.del.ExecContext(ctx, key); err != nil {
		return s.fail("delete", err)
	}
	return nil
}

// Sweep implements idem.Store. Each call is one short write transaction deleting at most batch
// records, found by the expires_at index.
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	if err := s.ready(ctx); err != nil {
		return 0, err
	}
	if batch <= 0 {
		return 0, nil
	}
	r, err := s.sweep.ExecContext(ctx, now.UnixMicro(), batch)
	if err != nil {
		return 0, s.fail("sweep", err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return 0, s.fail("sweep", err)
	}
	return int(n), nil
}

// row is the scan destination of selectRecord. Integer columns are scanned into any and
// asserted, which skips database/sql's reflection-based conversion, the costliest part of a
// scan. Rows are pooled so a read allocates only what it returns.
type row struct {
	fp    string
	route string
	resp  sql.RawBytes // the driver's own copy of the blob
	req   sql.RawBytes // the request column, nil for NULL
	ints  [8]any       // the integer columns, as the driver returned them
	n     [8]int64     // the same, checked
	dest  [12]any
}

// Indexes in row.ints and row.n.
const (
	colState = iota
	colToken
	colLease
	colAttempts
	colCreated
	colCompleted // NULL (0) unless completed
	colExpires
	colStarts // 0 in a row written before starts were counted
)

var rowPool = sync.Pool{New: func() any {
	r := new(row)
	i := &r.ints
	r.dest = [12]any{&r.fp, &i[colState], &i[colToken], &i[colLease], &i[colAttempts], &r.resp, &i[colCreated], &i[colCompleted], &i[colExpires], &r.route, &i[colStarts], &r.req}
	return r
}}

// read reads the record of key with stmt (selectRecord). When look is true the read is one
// of Reserve's looks: if the upsert with fp would claim the record at now, claimable is true
// and rec is left empty.
func (s *Store) read(ctx context.Context, stmt *sql.Stmt, key, fp string, now int64, look bool) (rec idem.Record, found, claimable bool, err error) {
	rs, err := stmt.QueryContext(ctx, key)
	if err != nil {
		return rec, false, false, err
	}
	defer rs.Close()
	if !rs.Next() {
		return rec, false, false, rs.Err()
	}
	r := rowPool.Get().(*row)
	defer func() {
		r.fp, r.route, r.resp, r.req, r.ints = "", "", nil, nil, [8]any{}
		rowPool.Put(r)
	}()
	if err := rs.Scan(r.dest[:]...); err != nil {
		return rec, false, false, err
	}
	if err := r.check(); err != nil {
		return rec, false, false, err
	}
	n := &r.n
	if look && (n[colExpires] <= now || n[colState] == stateInProgress && n[colLease] <= now && r.fp == fp) {
		return rec, true, true, nil
	}
	rec, err = r.record(key)
	if err != nil {
		return rec, false, false, err
	}
	return rec, true, false, rs.Close()
}

// check fills r.n from r.ints: every integer column must hold an integer, and only
// completed_at may be NULL.
func (r *row) check() error {
	for i, v := range r.ints {
		switch x := v.(type) {
		case int64:
			r.n[i] = x
		case nil:
			if i != colCompleted {
				return fmt.Errorf("%w: integer column %d is NULL", idem.ErrCorruptRecord, i)
			}
			r.n[i] = 0
		default:
			return fmt.Errorf("%w: integer column %d holds a %T", idem.ErrCorruptRecord, i, v)
		}
	}
	return nil
}

// record converts a checked row.
func (r *row) record(key string) (idem.Record, error) {
	n := &r.n
	rec := idem.Record{
		Key:         key,
		Fingerprint: r.fp,
		Route:       r.route,
		State:       idem.State(n[colState]),
		Token:       n[colToken],
		LeaseUntil:  time.UnixMicro(n[colLease]),
		Attempts:    int(n[colAttempts]),
		Starts:      int(max(n[colStarts], n[colAttempts])),
		CreatedAt:   time.UnixMicro(n[colCreated]),
		ExpiresAt:   time.UnixMicro(n[colExpires]),
	}
	var err error
	if rec.Request, err = decodeRequest(r.req); err != nil {
		return idem.Record{}, err
	}
	switch n[colState] {
	case stateInProgress:
	case stateCompleted:
		if r.resp == nil {
			return idem.Record{}, fmt.Errorf("%w: completed record without a response", idem.ErrCorruptRecord)
		}
		resp, err := storekit.DecodeResponse(r.resp)
		if err != nil {
			return idem.Record{}, err
		}
		rec.Response = &resp
		if r.ints[colCompleted] != nil {
			rec.CompletedAt = time.UnixMicro(n[colCompleted])
		}
	default:
		return idem.Record{}, fmt.Errorf("%w: unknown state %d", idem.ErrCorruptRecord, n[colState])
	}
	return rec, nil
}
