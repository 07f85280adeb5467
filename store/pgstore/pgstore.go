package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

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

// Options configure a Store. The zero value is a good default for every field.
type Options struct {
	// Schema is the PostgreSQL schema of the records table and of MigrationsTable; Migrate
	// creates it if missing. Default "": unqualified names, resolved by the connection's
	// search_path (usually "public"). Same rules as Table.
	Schema string
	// Table names the records table. Default DefaultTable ("idem_records"). It must be 1 to
	// 48 ASCII letters, digits and underscores, not starting with a digit. Several apps may
	// share a database with a table (or schema) each.
	Table string
	// TxTTL is how long a response stored by DoTx or a TxRunner is replayed, from the claim (the
	// handler's transaction begins there). Default 24h.
	TxTTL time.Duration
	// Now is the clock of DoTx (the engine passes its own times to the other methods).
	// Default time.Now.
	Now func() time.Time
	// GroupCommit, when positive, makes Reserve and Complete calls that arrive together
	// share transactions (group commit): up to GroupCommit transactions run at once, each on
	// one pool connection, each carrying the calls waiting when it starts (at most 64, and no
	// more once their responses reach 1 MiB), their statements sent in one round trip and
	// committed together. Each call's outcome is the one its own statement would have had: it
	// is handed out only after the commit, and if any statement of the transaction fails, all
	// of them roll back and every call gets the error (the engine fails closed). A call that
	// finds a transaction slot free runs at once, so this adds no wait on a quiet store; under
	// load it cuts PostgreSQL's work, and the round trips, per call several times. Default 0:
	// every call is its own statement.
	//
	// The price: a call waits for the slowest statement of its transaction, so a key whose
	// row another transaction holds for long (a DoTx whose function is slow, on the same
	// table) delays the calls grouped with it. DoTx itself never groups. The workers run
	// until Close.
	GroupCommit int
	// PartitionWidth, when positive, selects the partitioned layout: the records table is
	// partitioned by range on the time each row was written, one partition per
	// PartitionWidth, and Sweep drops whole partitions once every record in them has expired,
	// instead of deleting rows (see "Partitioned layout" in the package documentation). It
	// must be at least 1s. It combines with GroupCommit. Migrate converts a table
	// of the plain layout. Default 0: one plain table, swept row by row.
	PartitionWidth time.Duration
	// PartitionMargin is how long past the last expiry of every record in a partition Sweep
	// waits before it drops the partition: the allowance for clocks that run behind (a reader
	// whose clock is behind sees a record live for longer). Only with PartitionWidth.
	// Default 10m.
	PartitionMargin time.Duration
}

func (o Options) withDefaults() (Options, error) {
	o.Table = cmp.Or(o.Table, DefaultTable)
	o.TxTTL, o.Now = txmode.Defaults(o.TxTTL, o.Now)
	switch {
	case !validName(o.Table):
		return o, storeerr.Option("pgstore", "Options.Table", "%q is not a valid table name (1 to 48 letters, digits and underscores, not starting with a digit)", o.Table)
	case o.Schema != "" && !validName(o.Schema):
		return o, storeerr.Option("pgstore", "Options.Schema", "%q is not a valid schema name (1 to 48 letters, digits and underscores, not starting with a digit)", o.Schema)
	case o.TxTTL < time.Millisecond:
		return o, storeerr.Option("pgstore", "Options.TxTTL", "%s is below 1ms", o.TxTTL)
	case o.GroupCommit < 0:
		return o, storeerr.Option("pgstore", "Options.GroupCommit", "%d is negative", o.GroupCommit)
	}
	if err := o.partitionDefaults(); err != nil {
		return o, err
	}
	return o, nil
}

// validName is the SQL backends' shared rule for table, schema and database names.
var validName = sqlmigrate.ValidName

func invalid(format string, args ...any) error {
	return storeerr.Invalid("pgstore", format, args...)
}

// Store is an idem.Store in a PostgreSQL table. It is safe for concurrent use by many
// goroutines and many processes sharing the database. Create it with New or Open; run Migrate
// once (at every start is fine) before use.
type Store struct {
	pool       *pgxpool.Pool
	ownPool    bool
	opt        Options
	name       string // the quoted, possibly schema-qualified records table
	migrations string // the quoted, possibly schema-qualified migrations table
	closed     atomic.Bool
	q          queries
	group      *group        // nil unless Options.GroupCommit
	part       *partitioning // nil unless Options.PartitionWidth
}

// New returns a Store on pool, which stays the caller's: Close does not close it. It does not
// touch the database; call Migrate to create the table. It fails with an error wrapping
// idem.ErrInvalidInput, naming the field, for bad options.
func New(pool *pgxpool.Pool, opt Options) (*Store, error) {
	if pool == nil {
		return nil, invalid("pool is nil")
	}
	o, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, opt: o}
	if o.Schema != "" {
		s.name = pgx.Identifier{o.Schema, o.Table}.Sanitize()
		s.migrations = pgx.Identifier{o.Schema, MigrationsTable}.Sanitize()
	} else {
		s.name = pgx.Identifier{o.Table}.Sanitize()
		s.migrations = pgx.Identifier{MigrationsTable}.Sanitize()
	}
	s.q = newQueries(s.name)
	if o.GroupCommit > 0 {
		s.group = newGroup(s, o.GroupCommit)
	}
	if o.PartitionWidth > 0 {
		s.part = newPartitioning(s)
	}
	return s, nil
}

// Open connects to the database at url (a PostgreSQL URL or key=value string, as pgxpool
// accepts: pool_max_conns and the other pool_* parameters apply) and returns a Store that
// owns the pool: Close closes it. ctx bounds the first connection.
func Open(ctx context.Context, url string, opt Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors may quote the URL, password included: keep them out.
		return nil, invalid("cannot parse the connection string")
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: open: %w", err)
	}
	s, err := New(pool, opt)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownPool = true
	return s, nil
}

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// GroupCommit returns Options.GroupCommit: how many group transactions may run at once (0:
// calls are not grouped).
func (s *Store) GroupCommit() int { return s.opt.GroupCommit }

// Table returns the quoted, schema-qualified (when Options.Schema is set) records table.
func (s *Store) Table() string { return s.name }

// Close makes every later call fail with idem.ErrClosed and, if the store was made by Open, closes
// its pool. With Options.GroupCommit, the calls waiting for a group transaction get idem.ErrClosed
// (nothing of theirs was sent) and Close waits for the transactions in flight to end. It is
// safe to call twice.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.group != nil {
		s.group.close()
	}
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

// querier is what the record statements run on: the pool, or a transaction (DoTx).
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ready fails if the store is closed or ctx is done.
func (s *Store) ready(ctx context.Context) error { return storeerr.Ready(ctx, s.closed.Load()) }

func opErr(op string, err error) error { return storeerr.Op("pgstore", op, err) }

// reserveRetries bounds the re-runs of the claim statement when the row that blocked it was
// not visible to the statement's snapshot (see queries.reserve): each re-run has a newer one.
const reserveRetries = 16

// Reserve implements idem.Store in one statement: one round trip (a second only in a rare
// race, when the row that blocked the statement was committed after its snapshot began). The
// statement stores the route too.
func (s *Store) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	if err := s.ready(ctx); err != nil {
		return idem.Reservation{}, err
	}
	var res idem.Reservation
	args, err := reserveArgs(req)
	if err == nil {
		if s.group != nil {
			op := &groupOp{ctx: ctx, key: req.Key, args: args}
			if err = s.group.call(op); err == nil {
				res = op.res // final: call saw op.done closed (a call that gave up may not read it)
			}
		} else {
			res, err = s.reserve(ctx, s.pool, args)
		}
	}
	if err != nil {
		return idem.Reservation{}, opErr("reserve", err)
	}
	return res, nil
}

// reserveArgs checks a claim's input and returns the parameters of queries.reserve.
func reserveArgs(req idem.ReserveRequest) ([]any, error) {
	if err := idem.CheckKey(req.Key); err != nil {
		return nil, err
	}
	switch {
	case !idem.ValidFingerprint(req.Fingerprint):
		return nil, invalid("fingerprint %.80q is not %d lowercase hex digits", req.Fingerprint, idem.FingerprintLen)
	case req.Lease <= 0:
		return nil, invalid("lease %s is not positive", req.Lease)
	case req.TTL <= 0:
		return nil, invalid("TTL %s is not positive", req.TTL)
	}
	now := req.Now
	return []any{req.Key, req.Fingerprint, now.UnixMicro(), now.Add(req.Lease).UnixMicro(), now.Add(req.TTL).UnixMicro(),
		storekit.NextToken(0, now), storekit.CleanRoute(req.Route), encodeRequest(req.Request)}, nil
}

// encodeRequest returns the encoding of r a claim stores: nil (NULL) for none.
func encodeRequest(r *idem.Request) []byte {
	if r == nil {
		return nil
	}
	return storekit.EncodeRequest(*r)
}

// reserve runs the claim statement on db (args from reserveArgs), again while it finds
// neither a claim nor a record.
func (s *Store) reserve(ctx context.Context, db querier, args []any) (idem.Reservation, error) {
	if s.part != nil {
		return s.part.reserve(ctx, db, args)
	}
	key := args[0].(string)
	for range reserveRetries {
		var res idem.Reservation
		again, recErr, err := scanReservation(db.QueryRow(ctx, s.q.reserve, args...), key, &res)
		if again {
			continue // the blocking row is not in this statement's snapshot: run it again
		}
		if err = cmp.Or(err, recErr); err != nil {
			return idem.Reservation{}, err
		}
		return res, nil
	}
	return idem.Reservation{}, errNeither(key)
}

func errNeither(key string) error {
	return fmt.Errorf("claim of %.80q found neither a claim nor a record %d times", key, reserveRetries)
}

// Complete implements idem.Store: one UPDATE fenced on the token.
func (s *Store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if s.group != nil {
		args := completeArgs(key, token, resp, now, expiresAt)
		op := &groupOp{ctx: ctx, complete: true, key: key, args: args, size: len(args[2].([]byte))}
		return opErr("complete", s.group.call(op))
	}
	return opErr("complete", s.complete(ctx, s.pool, key, token, resp, now, expiresAt))
}

// completeArgs returns the parameters of queries.complete.
func completeArgs(key string, token int64, resp idem.Response, now, expiresAt time.Time) []any {
	return []any{key, token, storekit.EncodeResponse(resp), now.UnixMicro(), expiresAt.UnixMicro()}
}

func (s *Store) complete(ctx context.Context, db querier, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	tag, err := db.Exec(ctx, s.q.complete, completeArgs(key, token, resp, now, expiresAt)...)
	return fenced(tag, err)
}

func fenced(tag pgconn.CommandTag, err error) error {
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
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
	tag, err := s.pool.Exec(ctx, s.q.release, key, token)
	return opErr("release", fenced(tag, err))
}

// Extend implements idem.Store.
func (s *Store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, s.q.extend, key, token, until.UnixMicro())
	return opErr("extend", fenced(tag, err))
}

// Get implements idem.Store. A released record is returned expired (ExpiresAt at the epoch).
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := s.ready(ctx); err != nil {
		return idem.Record{}, err
	}
	rec := idem.Record{Key: key}
	var sc scan
	err := s.pool.QueryRow(ctx, s.q.get, key).Scan(sc.dest(&rec)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return idem.Record{}, idem.ErrNotFound
	}
	if err == nil {
		err = sc.finish(&rec)
	}
	if err != nil {
		return idem.Record{}, opErr("get", err)
	}
	return rec, nil
}

// Delete removes key's record whatever its state (idem.Deleter, for operators).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, s.q.del, key)
	return opErr("delete", err)
}

// Sweep implements idem.Store: one DELETE of at most batch rows found by the expires_at
// index, oldest first, skipping rows locked by a concurrent claim; no long lock, no full scan.
// A negative batch is an error; 0 deletes nothing.
//
// In the partitioned layout (Options.PartitionWidth) Sweep deletes no rows: it creates the
// partitions of the current and the next period and drops every older partition whose records
// all expired at least Options.PartitionMargin before now, and returns how many records the
// dropped partitions held (which may exceed batch). SweepRows deletes rows in that layout too.
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	if run, err := storeerr.SweepBatch(ctx, s.ready, "pgstore", batch); !run {
		return 0, err
	}
	if s.part != nil {
		n, err := s.part.maintain(ctx, now)
		return n, opErr("sweep", err)
	}
	return s.sweepRows(ctx, now, batch)
}

// sweepRows is the plain layout's Sweep: one bounded DELETE.
func (s *Store) sweepRows(ctx context.Context, now time.Time, batch int) (int, error) {
	q := s.q.sweep
	if s.part != nil {
		q = s.q.sweepByKey
	}
	tag, err := s.pool.Exec(ctx, q, now.UnixMicro(), batch)
	if err != nil {
		return 0, opErr("sweep", err)
	}
	return int(tag.RowsAffected()), nil
}

// scan holds the columns of a record that need converting after Scan.
type scan struct {
	state                                       int16
	leaseUntil, createdAt, completedAt, expires int64
	response                                    []byte
	request                                     []byte // NULL: none
}

// dest returns Scan destinations for the record columns, in queries' column order.
func (sc *scan) dest(rec *idem.Record) []any {
	return []any{&rec.Fingerprint, &sc.state, &rec.Token, &sc.leaseUntil, &rec.Attempts,
		&sc.response, &sc.createdAt, &sc.completedAt, &sc.expires, &rec.Route, &rec.Starts, &sc.request}
}

func (sc *scan) finish(rec *idem.Record) error {
	rec.State = idem.State(sc.state)
	if rec.State != idem.StateInProgress && rec.State != idem.StateCompleted {
		return fmt.Errorf("%w: record %.80q has state %d", idem.ErrCorruptRecord, rec.Key, sc.state)
	}
	rec.Starts = max(rec.Starts, rec.Attempts) // 0 in a row written before starts were counted
	rec.LeaseUntil = time.UnixMicro(sc.leaseUntil)
	rec.CreatedAt = time.UnixMicro(sc.createdAt)
	if sc.completedAt != 0 {
		rec.CompletedAt = time.UnixMicro(sc.completedAt)
	}
	rec.ExpiresAt = time.UnixMicro(sc.expires)
	if sc.request != nil {
		r, err := storekit.DecodeRequest(sc.request)
		if err != nil {
			return fmt.Errorf("record %.80q: %w", rec.Key, err)
		}
		rec.Request = &r
	}
	if sc.response != nil {
		r, err := storekit.DecodeResponse(sc.response)
		if err != nil {
			return fmt.Errorf("record %.80q: %w", rec.Key, err)
		}
		rec.Response = &r
	}
	return nil
}

const lockReleaseTimeout = 10 * time.Second
