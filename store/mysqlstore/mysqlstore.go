package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/storeerr"
	"github.com/idemkit/idem/store/internal/txmode"
	"github.com/idemkit/idem/store/sqlmigrate"
	"github.com/idemkit/idem/store/storekit"
)

var (
	_ idem.Store   = (*Store)(nil)
	_ idem.Deleter = (*Store)(nil)
)

// DefaultTable is the records table used when Options.Table is empty.
const DefaultTable = "idem_records"

var errBadConn = driver.ErrBadConn

// Options configure a Store. The zero value is a good default for every field.
type Options struct {
	// Database is the database (MySQL's schema) of the records table and MigrationsTable;
	// Migrate creates it if missing. Default "": the connection's default database (the DSN's
	// /dbname). Same rules as Table.
	Database string
	// Table names the records table. Default DefaultTable ("idem_records"). It must be 1 to
	// 48 ASCII letters, digits and underscores, not starting with a digit. Several apps may
	// share a database with a table each.
	Table string
	// TxTTL is how long a response stored by DoTx or a TxRunner is replayed. Default 24h.
	TxTTL time.Duration
	// Now is the clock of DoTx and TxRunner (the engine passes its own times to the other
	// methods). Default time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() (Options, error) {
	o.Table = cmp.Or(o.Table, DefaultTable)
	o.TxTTL, o.Now = txmode.Defaults(o.TxTTL, o.Now)
	switch {
	case o.TxTTL < time.Millisecond:
		return o, storeerr.Option("mysqlstore", "Options.TxTTL", "%s is below 1ms", o.TxTTL)
	case !validName(o.Table):
		return o, storeerr.Option("mysqlstore", "Options.Table", "%q is not a valid table name (1 to 48 letters, digits and underscores, not starting with a digit)", o.Table)
	case o.Database != "" && !validName(o.Database):
		return o, storeerr.Option("mysqlstore", "Options.Database", "%q is not a valid database name (1 to 48 letters, digits and underscores, not starting with a digit)", o.Database)
	}
	return o, nil
}

// validName is the SQL backends' shared rule for table, schema and database names.
var validName = sqlmigrate.ValidName

// quote quotes a name already checked by validName.
func quote(name string) string { return "`" + name + "`" }

func invalid(format string, args ...any) error {
	return storeerr.Invalid("mysqlstore", format, args...)
}

// Store is an idem.Store in a MySQL or MariaDB (InnoDB) table. It is safe for concurrent use by
// many goroutines and many processes sharing the database. Create it with New or Open; run
// Migrate once (at every start is fine) before use.
type Store struct {
	db         *sql.DB
	ownDB      bool
	opt        Options
	name       string // the quoted, possibly database-qualified records table
	migrations string
	closed     atomic.Bool
	q          queries

	mu    sync.RWMutex
	stmts map[string]*sql.Stmt // prepared on first use; database/sql re-prepares per connection

	// server is what the server is, read on first need: serverUnknown, serverMariaDB or
	// serverMySQL. MariaDB bounds one statement's lock wait with SET STATEMENT … FOR.
	server atomic.Int32
}

// New returns a Store on db, a *sql.DB of github.com/go-sql-driver/mysql, which stays the
// caller's: Close does not close it. Any DSN settings work (clientFoundRows, interpolateParams,
// …): the store's statements do not depend on them. New does not touch the database; call
// Migrate to create the table. It fails with an error wrapping idem.ErrInvalidInput, naming
// the field, for bad options.
func New(db *sql.DB, opt Options) (*Store, error) {
	if db == nil {
		return nil, storeerr.Option("mysqlstore", "db", "is nil")
	}
	o, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, opt: o, stmts: make(map[string]*sql.Stmt)}
	if o.Database != "" {
		s.name = quote(o.Database) + "." + quote(o.Table)
		s.migrations = quote(o.Database) + "." + quote(MigrationsTable)
	} else {
		s.name = quote(o.Table)
		s.migrations = quote(MigrationsTable)
	}
	s.q = newQueries(s.name)
	return s, nil
}

// Open connects to the database at dsn (go-sql-driver's form, such as
// "user:pass@tcp(127.0.0.1:3306)/db") and returns a Store that owns the connection pool:
// Close closes it. ctx bounds the first connection.
func Open(ctx context.Context, dsn string, opt Options) (*Store, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		// The driver's parse errors may quote the DSN, password included: keep them out.
		return nil, invalid("cannot parse the DSN")
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, invalid("DSN: %v", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxIdleConns(16)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("mysqlstore: open: %w", err)
	}
	s, err := New(db, opt)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	s.ownDB = true
	return s, nil
}

// DB returns the store's database handle.
func (s *Store) DB() *sql.DB { return s.db }

// Table returns the quoted, database-qualified (when Options.Database is set) records table.
func (s *Store) Table() string { return s.name }

// Close makes every later call fail with idem.ErrClosed and, if the store was made by Open, closes
// its database handle. It is safe to call twice.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	for q, st := range s.stmts {
		_ = st.Close()
		delete(s.stmts, q)
	}
	s.mu.Unlock()
	if s.ownDB {
		return s.db.Close()
	}
	return nil
}

// stmt returns the prepared statement for q, preparing it on first use. Executing a prepared
// statement is one round trip, where an unprepared one with arguments costs a prepare too
// (unless the DSN sets interpolateParams).
func (s *Store) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	s.mu.RLock()
	st := s.stmts[q]
	s.mu.RUnlock()
	if st != nil {
		return st, nil
	}
	// Prepare without the lock, so a slow prepare (a full pool) holds up no other caller
	// beyond its own context; the first to finish is kept.
	st, err := s.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	prev, closed := s.stmts[q], s.closed.Load()
	if prev == nil && !closed {
		s.stmts[q] = st
	}
	s.mu.Unlock()
	// A statement is closed outside the lock: Close waits for every connection it was
	// prepared on to be free of its current query, and that query (one waiting on a row
	// lock, in a DoTx) may wait for a caller who needs the lock.
	switch {
	case closed:
		_ = st.Close()
		return nil, idem.ErrClosed
	case prev != nil:
		_ = st.Close()
		return prev, nil
	}
	return st, nil
}

// execer runs the store's statements: the Store itself on the pool, each in autocommit, or a
// txExec in a DoTx transaction.
type execer interface {
	exec(ctx context.Context, q string, args ...any) (sql.Result, error)
	queryRow(ctx context.Context, q string, args ...any) (*sql.Row, error)
}

func (s *Store) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := s.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (s *Store) queryRow(ctx context.Context, q string, args ...any) (*sql.Row, error) {
	st, err := s.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryRowContext(ctx, args...), nil
}

// ready fails if the store is closed or ctx is done.
func (s *Store) ready(ctx context.Context) error { return storeerr.Ready(ctx, s.closed.Load()) }

func opErr(op string, err error) error { return storeerr.Op("mysqlstore", op, err) }

// MySQL error numbers the store handles.
const (
	errDupEntry     = 1062 // ER_DUP_ENTRY: the key was inserted meanwhile
	errDeadlock     = 1213 // ER_LOCK_DEADLOCK: InnoDB rolled the transaction back
	errLockWait     = 1205 // ER_LOCK_WAIT_TIMEOUT: innodb_lock_wait_timeout ran out
	errDupFieldName = 1060 // ER_DUP_FIELDNAME: a migration's column exists already
	errDupKeyName   = 1061 // ER_DUP_KEYNAME: a migration's index exists already
)

func isMySQLError(err error, number uint16) bool {
	var myErr *mysql.MySQLError
	return errors.As(err, &myErr) && myErr.Number == number
}

// reserveRetries bounds Reserve's loop when the row changes between its steps.
const reserveRetries = 32

// Reserve implements idem.Store.
//
// MySQL has no RETURNING on an upsert, so the claim is a short loop of statements, each
// atomic on its own, in autocommit (no transaction is held across round trips):
//
//  1. SELECT the row. If it exists and cannot be claimed at now, it is the answer: one round
//     trip, which is the replay and in-flight path. (The read is the point at which Reserve
//     takes effect; a row that cannot be claimed is returned untouched.)
//  2. No row: INSERT the claim. Success is a new claim (two round trips); a duplicate key
//     means another caller inserted meanwhile: back to 1.
//  3. A row that can be claimed (expired, or a stale lease with the same fingerprint): an
//     UPDATE whose WHERE compares the whole version read in 1 (token, state, lease and expiry,
//     fingerprint) — a compare-and-swap. One row changed is the claim or takeover (two round
//     trips); none means the row changed meanwhile: back to 1.
//
// Deadlocks InnoDB reports on concurrent inserts of one key roll back only that statement
// and are retried the same way.
//
// The INSERT or compare-and-swap UPDATE, the one write of the claim, stores the route too.
func (s *Store) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	if err := s.ready(ctx); err != nil {
		return idem.Reservation{}, err
	}
	res, err := s.reserve(ctx, req)
	return res, opErr("reserve", err)
}

// reserve is Reserve's loop. (DoTx claims in its transaction with claimTx.)
func (s *Store) reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	key, fingerprint := req.Key, req.Fingerprint
	if err := checkClaim(key, fingerprint); err != nil {
		return idem.Reservation{}, err
	}
	switch {
	case req.Lease <= 0:
		return idem.Reservation{}, invalid("lease %s is not positive", req.Lease)
	case req.TTL <= 0:
		return idem.Reservation{}, invalid("TTL %s is not positive", req.TTL)
	}
	now := req.Now.Truncate(time.Microsecond)
	claim := idem.Record{
		Key: key, Fingerprint: fingerprint, State: idem.StateInProgress, Attempts: 1, Starts: 1,
		LeaseUntil: now.Add(req.Lease).Truncate(time.Microsecond), CreatedAt: now,
		ExpiresAt: now.Add(req.TTL).Truncate(time.Microsecond), Route: storekit.CleanRoute(req.Route),
		Request: req.Request.Clone(), // the store's own copy: the caller may reuse its buffers
	}
	for range reserveRetries {
		old, err := s.get(ctx, s, s.q.get, key)
		switch {
		case errors.Is(err, idem.ErrNotFound):
			claim.Token = storekit.NextToken(0, now)
			_, err := s.exec(ctx, s.q.insert, key, fingerprint, claim.Token, claim.LeaseUntil.UnixMicro(),
				now.UnixMicro(), claim.ExpiresAt.UnixMicro(), claim.Route, encodeRequest(claim.Request))
			if isMySQLError(err, errDupEntry) || isMySQLError(err, errDeadlock) {
				continue
			}
			if err != nil {
				return idem.Reservation{}, err
			}
			return idem.Reservation{Claimed: true, Record: claim}, nil
		case err != nil:
			return idem.Reservation{}, err
		}
		res, done, err := s.swapClaim(ctx, s, claim, old, now)
		if isMySQLError(err, errDeadlock) {
			continue
		}
		if err != nil || done {
			return res, err
		}
	}
	return idem.Reservation{}, fmt.Errorf("claim of %.80q lost %d races in a row", key, reserveRetries)
}

// swapClaim claims claim's key in place of old, the record found there, through e: if old
// may be claimed at now with claim's fingerprint (it expired, or its lease ran out and the
// fingerprint is the same), one UPDATE conditioned on every field of old that the decision
// read. done is true when the answer is decided: the claim, or old itself when it may not be
// claimed; false when the UPDATE matched no row (another writer changed the record first, so
// the caller reads it again).
func (s *Store) swapClaim(ctx context.Context, e execer, claim, old idem.Record, now time.Time) (res idem.Reservation, done bool, err error) {
	expired := old.Expired(now)
	if !expired && !(old.LeaseExpired(now) && old.Fingerprint == claim.Fingerprint) {
		return idem.Reservation{Record: old}, true, nil
	}
	rec := claim
	rec.Token = storekit.NextToken(old.Token, now)
	switch {
	case !expired: // a takeover keeps the claim's history, and its route and request if it has them
		rec.Attempts, rec.Starts, rec.CreatedAt = old.Attempts+1, old.Starts+1, old.CreatedAt
		if old.Route != "" {
			rec.Route = old.Route
		}
		if old.Request != nil {
			rec.Request = old.Request
		}
	case old.ExpiresAt.UnixMicro() == 0 && old.Fingerprint == claim.Fingerprint:
		// Released by a failed attempt and retried: the record goes on counting starts.
		rec.Starts, rec.CreatedAt = old.Starts+1, old.CreatedAt
	}
	r, err := e.exec(ctx, s.q.swap,
		rec.Fingerprint, rec.Token, rec.LeaseUntil.UnixMicro(), rec.Attempts, rec.CreatedAt.UnixMicro(), rec.ExpiresAt.UnixMicro(), rec.Route, rec.Starts, encodeRequest(rec.Request),
		rec.Key, old.Token, int(old.State), old.LeaseUntil.UnixMicro(), old.ExpiresAt.UnixMicro(), old.Fingerprint)
	if err != nil {
		return idem.Reservation{}, false, err
	}
	n, err := r.RowsAffected()
	if err != nil || n != 1 {
		return idem.Reservation{}, false, err
	}
	return idem.Reservation{Claimed: true, Takeover: !expired, Record: rec}, true, nil
}

// Complete implements idem.Store: one UPDATE fenced on the token.
func (s *Store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	r, err := s.exec(ctx, s.q.complete, storekit.EncodeResponse(resp), now.UnixMicro(), expiresAt.UnixMicro(), key, token)
	return opErr("complete", changedOne(r, err))
}

func changedOne(r sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := r.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return idem.ErrLeaseLost
	}
	return nil
}

// Release implements idem.Store: the record stays, expired (expires_at = lease_until = 0),
// so the next claim's token is larger and the released token is dead.
func (s *Store) Release(ctx context.Context, key string, token int64) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	r, err := s.exec(ctx, s.q.release, key, token)
	return opErr("release", changedOne(r, err))
}

// Extend implements idem.Store: one UPDATE, and a SELECT only when the UPDATE changed nothing
// (the same lease set twice: MySQL counts changed rows, not matched ones).
func (s *Store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	err := changedOne(s.exec(ctx, s.q.extend, until.UnixMicro(), until.UnixMicro(), key, token))
	if errors.Is(err, idem.ErrLeaseLost) {
		var one int
		var row *sql.Row
		if row, err = s.queryRow(ctx, s.q.held, key, token); err == nil {
			err = row.Scan(&one)
		}
		if errors.Is(err, sql.ErrNoRows) {
			err = idem.ErrLeaseLost
		}
	}
	return opErr("extend", err)
}

// Get implements idem.Store. A released record is returned expired (ExpiresAt at the epoch).
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := s.ready(ctx); err != nil {
		return idem.Record{}, err
	}
	rec, err := s.get(ctx, s, s.q.get, key)
	return rec, opErr("get", err)
}

// get reads key's record on e with q (queries.get or lockingGet).
func (s *Store) get(ctx context.Context, e execer, q, key string) (idem.Record, error) {
	rec := idem.Record{Key: key}
	var state int16
	var leaseUntil, createdAt, completedAt, expires int64
	var response, request []byte
	row, err := e.queryRow(ctx, q, key)
	if err != nil {
		return idem.Record{}, err
	}
	err = row.Scan(&rec.Fingerprint, &state, &rec.Token, &leaseUntil,
		&rec.Attempts, &response, &createdAt, &completedAt, &expires, &rec.Route, &rec.Starts, &request)
	if errors.Is(err, sql.ErrNoRows) {
		return idem.Record{}, idem.ErrNotFound
	}
	if err != nil {
		return idem.Record{}, err
	}
	rec.State = idem.State(state)
	if rec.State != idem.StateInProgress && rec.State != idem.StateCompleted {
		return idem.Record{}, fmt.Errorf("%w: record %.80q has state %d", idem.ErrCorruptRecord, key, state)
	}
	rec.Starts = max(rec.Starts, rec.Attempts) // 0 in a row written before starts were counted
	rec.LeaseUntil = time.UnixMicro(leaseUntil)
	rec.CreatedAt = time.UnixMicro(createdAt)
	if completedAt != 0 {
		rec.CompletedAt = time.UnixMicro(completedAt)
	}
	rec.ExpiresAt = time.UnixMicro(expires)
	if request != nil {
		r, err := storekit.DecodeRequest(request)
		if err != nil {
			return idem.Record{}, fmt.Errorf("record %.80q: %w", key, err)
		}
		rec.Request = &r
	}
	if response != nil {
		r, err := storekit.DecodeResponse(response)
		if err != nil {
			return idem.Record{}, fmt.Errorf("record %.80q: %w", key, err)
		}
		rec.Response = &r
	}
	return rec, nil
}

// Delete removes key's record whatever its state (idem.Deleter, for operators).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	_, err := s.exec(ctx, s.q.del, key)
	return opErr("delete", err)
}

// Sweep implements idem.Store: one DELETE … ORDER BY expires_at LIMIT batch, which walks the
// expires_at index from the oldest; no long lock, no full scan. A negative batch is an error;
// 0 deletes nothing.
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	if run, err := storeerr.SweepBatch(ctx, s.ready, "mysqlstore", batch); !run {
		return 0, err
	}
	r, err := s.exec(ctx, s.q.sweep, now.UnixMicro(), batch)
	if err != nil {
		return 0, opErr("sweep", err)
	}
	n, err := r.RowsAffected()
	return int(n), opErr("sweep", err)
}

// encodeRequest returns the encoding of r a claim stores: nil (NULL) for none.
func encodeRequest(r *idem.Request) []byte {
	if r == nil {
		return nil
	}
	return storekit.EncodeRequest(*r)
}
