package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/storeerr"
)

// partitionLockTimeout bounds the waits of partition maintenance for its locks, so that a
// long transaction on the table delays a partition's creation or drop (retried at the next
// Sweep) instead of queueing the claims behind it.
const partitionLockTimeout = 2 * time.Second

func (o *Options) partitionDefaults() error {
	if o.PartitionWidth == 0 {
		if o.PartitionMargin != 0 {
			return storeerr.Option("pgstore", "Options.PartitionMargin", "%s is set without Options.PartitionWidth", o.PartitionMargin)
		}
		return nil
	}
	o.PartitionMargin = cmp.Or(o.PartitionMargin, 10*time.Minute)
	switch {
	case o.PartitionWidth < time.Second:
		return storeerr.Option("pgstore", "Options.PartitionWidth", "%s is below 1s", o.PartitionWidth)
	case o.PartitionMargin < 0:
		return storeerr.Option("pgstore", "Options.PartitionMargin", "%s is negative", o.PartitionMargin)
	}
	return nil
}

// partitioning is the partitioned layout of a Store (Options.PartitionWidth).
type partitioning struct {
	s      *Store
	width  int64 // µs
	margin time.Duration
	// lockSQL takes the claim lock of a key ($1) for the rest of the transaction. The seed
	// keeps the keys of different tables apart (a collision would only serialize two claims).
	lockSQL string
	// createLock serializes the processes creating this table's partitions.
	createLock int64

	mu    sync.Mutex
	known map[int64]bool   // buckets whose partition this process created or saw
	claim map[int64]string // the claim statement of each recent bucket
}

func newPartitioning(s *Store) *partitioning {
	h := fnv.New64a()
	h.Write([]byte(s.name))
	seed := int64(h.Sum64() >> 1)
	return &partitioning{
		s:          s,
		width:      s.opt.PartitionWidth.Microseconds(),
		margin:     s.opt.PartitionMargin,
		lockSQL:    `SELECT pg_advisory_xact_lock(hashtextextended($1, ` + strconv.FormatInt(seed, 10) + `))`,
		createLock: seed ^ 0x1de3_0002,
		known:      map[int64]bool{},
		claim:      map[int64]string{},
	}
}

// bucket returns the number of the period that holds the time t (Unix µs).
func (p *partitioning) bucket(t int64) int64 {
	b := t / p.width
	if t < 0 && t%p.width != 0 {
		b--
	}
	return b
}

// partName returns the unquoted name of bucket b's partition.
func (p *partitioning) partName(b int64) string {
	return p.s.opt.Table + "_p" + strconv.FormatInt(b, 10)
}

func (p *partitioning) qualified(name string) string {
	if p.s.opt.Schema != "" {
		return pgx.Identifier{p.s.opt.Schema, name}.Sanitize()
	}
	return pgx.Identifier{name}.Sanitize()
}

// claimSQL returns the claim statement that writes into bucket b's partition. $1 key, $2
// fingerprint, $3 now (also the row's born), $4 lease_until, $5 expires_at, $6 the token of a
// first claim, $7 the route (a takeover keeps the one it finds unless that is "").
//
// It runs right after lockSQL, in the same transaction, so no other claim of the key runs
// between them, and its snapshot (taken after the lock was granted) sees every claim of the
// key that committed before. "old" finds and locks the key's row in whatever partition it is
// (the store keeps at most one per key); Complete, Release and Extend, which do not take the
// claim lock, only ever update that row in place, and FOR UPDATE returns its latest version.
// "done" returns a record completed and live in the snapshot as it is, without a lock (it is
// final until it expires), so a replay writes nothing; then "old" and "claim" are empty.
// "claim" is one row when the key may be claimed: absent, expired, or in progress past its
// lease with the same fingerprint. "ins" writes the claim into the current partition (over
// the old row when that is where it lives); "moved" deletes the old row when it lives in
// another partition, only once "ins" wrote the new one. So every claim leaves exactly one
// row for its key, in the newest partition it was claimed in.
func (p *partitioning) claimSQL(b int64) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q, ok := p.claim[b]; ok {
		return q
	}
	t := p.s.name
	lo, hi := strconv.FormatInt(b*p.width, 10), strconv.FormatInt((b+1)*p.width, 10)
	q := `WITH done AS (
	SELECT ` + cols + ` FROM ` + t + ` WHERE key = $1 AND state = 2 AND expires_at > $3
), old AS (
	SELECT born, ` + cols + ` FROM ` + t + ` WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM done) FOR UPDATE
), claim AS (
	SELECT o.token, o.attempts, o.created_at, o.expires_at, o.route, o.starts, o.fingerprint, o.request
	FROM (VALUES (1)) AS one (x) LEFT JOIN old AS o ON true
	WHERE NOT EXISTS (SELECT 1 FROM done) AND (o.token IS NULL OR o.expires_at <= $3
	   OR (o.state = 1 AND o.lease_until <= $3 AND o.fingerprint = $2))
), ins AS (
	INSERT INTO ` + p.qualified(p.partName(b)) + ` AS r (key, born, ` + cols + `)
	SELECT $1, $3, $2, 1,
		CASE WHEN c.token IS NULL THEN $6 ELSE GREATEST(c.token + 1, $6) END,
		$4,
		CASE WHEN c.token IS NULL OR c.expires_at <= $3 THEN 1 ELSE c.attempts + 1 END,
		NULL,
		CASE WHEN c.expires_at > $3 OR (c.expires_at = 0 AND c.fingerprint = $2) THEN c.created_at ELSE $3 END,
		0, GREATEST($5, $4),
		CASE WHEN c.token IS NULL OR c.expires_at <= $3 OR c.route = '' THEN $7 ELSE c.route END,
		CASE WHEN c.expires_at > $3 OR (c.expires_at = 0 AND c.fingerprint = $2) THEN GREATEST(c.starts, c.attempts) + 1 ELSE 1 END,
		CASE WHEN c.token IS NULL OR c.expires_at <= $3 OR c.request IS NULL THEN $8 ELSE c.request END
	FROM claim AS c
	ON CONFLICT (key) DO UPDATE SET
		fingerprint = excluded.fingerprint, state = 1, token = excluded.token,
		lease_until = excluded.lease_until, attempts = excluded.attempts, response = NULL,
		created_at = excluded.created_at, completed_at = 0, expires_at = excluded.expires_at,
		route = excluded.route, starts = excluded.starts, request = excluded.request
	WHERE r.expires_at <= $3
	   OR (r.state = 1 AND r.lease_until <= $3 AND r.fingerprint = excluded.fingerprint)
	RETURNING true, ` + cols + `
), moved AS (
	DELETE FROM ` + t + ` AS d
	WHERE d.key = $1 AND (d.born < ` + lo + ` OR d.born >= ` + hi + `) AND EXISTS (SELECT 1 FROM ins)
)
SELECT false, ` + cols + ` FROM done UNION ALL SELECT * FROM ins
UNION ALL SELECT false, ` + cols + ` FROM old WHERE NOT EXISTS (SELECT 1 FROM claim)`
	// Typed parameters: PostgreSQL cannot deduce one type for $4 from GREATEST and a column.
	q = paramTypes.Replace(q)
	if len(p.claim) >= 4 {
		clear(p.claim)
	}
	p.claim[b] = q
	return q
}

var paramTypes = strings.NewReplacer("$1", "$1::text", "$2", "$2::text", "$3", "$3::bigint",
	"$4", "$4::bigint", "$5", "$5::bigint", "$6", "$6::bigint", "$7", "$7::text", "$8", "$8::bytea")

// batcher is a pool or a transaction: both send a batch in one round trip.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// reserve is Store.reserve in the partitioned layout: the claim lock and the claim statement
// in one batch, so one round trip. On the pool the batch is one implicit transaction (the
// lock is held until the claim commits); in DoTx's transaction, until that commits.
func (p *partitioning) reserve(ctx context.Context, db querier, args []any) (idem.Reservation, error) {
	key := args[0].(string)
	b := p.bucket(args[2].(int64))
	bs, ok := db.(batcher)
	if !ok {
		return idem.Reservation{}, fmt.Errorf("pgstore: %T cannot send a batch", db)
	}
	if err := p.ensureKnown(ctx, b); err != nil {
		return idem.Reservation{}, err
	}
	for range reserveRetries {
		var res idem.Reservation
		var batch pgx.Batch
		batch.Queue(p.lockSQL, key)
		batch.Queue(p.claimSQL(b), args...)
		br := bs.SendBatch(ctx, &batch)
		_, err := br.Exec()
		var again bool
		var recErr error
		if err == nil {
			again, recErr, err = scanReservation(br.QueryRow(), key, &res)
		}
		if cerr := br.Close(); err == nil && !again {
			err = cerr
		}
		if isUndefinedTable(err) {
			// The partition was dropped since this process last saw it (its clock is far
			// behind the dropper's): create it again, then claim again.
			p.forget(b)
			if _, ok := db.(pgx.Tx); ok {
				return idem.Reservation{}, err // the transaction is aborted: DoTx retries
			}
			if err := p.ensureKnown(ctx, b); err != nil {
				return idem.Reservation{}, err
			}
			continue
		}
		if again {
			continue
		}
		if err = cmp.Or(err, recErr); err != nil {
			return idem.Reservation{}, err
		}
		return res, nil
	}
	return idem.Reservation{}, errNeither(key)
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

func (p *partitioning) forget(b int64) {
	p.mu.Lock()
	delete(p.known, b)
	p.mu.Unlock()
}

// ensureKnown creates bucket b's partition unless this process knows it exists.
func (p *partitioning) ensureKnown(ctx context.Context, b int64) error {
	p.mu.Lock()
	ok := p.known[b]
	p.mu.Unlock()
	if ok {
		return nil
	}
	return p.ensure(ctx, b)
}

// ensure creates bucket b's partition if it does not exist: a table like the parent, with
// its primary key on key and its indexes on expires_at and (created_at, key), then attached
// to the parent (whose index of newest-first listings takes the partition's). ATTACH
// PARTITION takes a SHARE UPDATE EXCLUSIVE lock on the parent, which claims do not wait for,
// and a CHECK constraint matching the range spares it the scan of the new table.
func (p *partitioning) ensure(ctx context.Context, b int64) error {
	name := p.partName(b)
	part := p.qualified(name)
	lo, hi := strconv.FormatInt(b*p.width, 10), strconv.FormatInt((b+1)*p.width, 10)
	err := pgx.BeginFunc(ctx, p.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = `+strconv.Itoa(int(partitionLockTimeout.Milliseconds()))); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, p.createLock); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, part).Scan(&exists); err != nil || exists {
			return err
		}
		for _, stmt := range []string{
			`CREATE TABLE ` + part + ` (LIKE ` + p.s.name + ` INCLUDING DEFAULTS)`,
			`ALTER TABLE ` + part + ` ADD PRIMARY KEY (key)`,
			`CREATE INDEX ON ` + part + ` (expires_at)`,
			`CREATE INDEX ON ` + part + ` (created_at, key)`,
			`ALTER TABLE ` + part + ` ADD CHECK (born >= ` + lo + ` AND born < ` + hi + `)`,
			`ALTER TABLE ` + p.s.name + ` ATTACH PARTITION ` + part + ` FOR VALUES FROM (` + lo + `) TO (` + hi + `)`,
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create partition %s: %w", name, err)
	}
	p.mu.Lock()
	p.known[b] = true
	p.mu.Unlock()
	return nil
}

// Partition is one partition of a records table in the partitioned layout.
type Partition struct {
	// Name is the partition's table name, in the records table's schema.
	Name string
	// From and To bound the write times of its rows: From ≤ born < To. From is the zero Time
	// for the partition that holds the rows of a table converted from the plain layout (all
	// written before the conversion).
	From, To time.Time
}

var toBound = regexp.MustCompile(`FROM \((MINVALUE|'?(-?\d+)'?)\) TO \((MAXVALUE|'?(-?\d+)'?)\)`)

// partitions returns the partitions of the records table, with their bounds in µs (from
// MINVALUE is minInt, to MAXVALUE is maxInt).
func (p *partitioning) partitions(ctx context.Context) ([]partition, error) {
	rows, err := p.s.pool.Query(ctx, `SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY c.relname`, p.s.name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []partition
	for rows.Next() {
		var name, bound string
		if err := rows.Scan(&name, &bound); err != nil {
			return nil, err
		}
		m := toBound.FindStringSubmatch(bound)
		if m == nil {
			return nil, fmt.Errorf("partition %s: bound %q not understood", name, bound)
		}
		pt := partition{name: name, from: minInt, to: maxInt}
		if m[2] != "" {
			pt.from, _ = strconv.ParseInt(m[2], 10, 64)
		}
		if m[4] != "" {
			pt.to, _ = strconv.ParseInt(m[4], 10, 64)
		}
		out = append(out, pt)
	}
	return out, rows.Err()
}

const (
	minInt = -1 << 63
	maxInt = 1<<63 - 1
)

type partition struct {
	name     string
	from, to int64
}

// Partitions lists the partitions of the records table in the partitioned layout, in name
// order. It fails with an error wrapping idem.ErrInvalidInput in the plain layout.
func (s *Store) Partitions(ctx context.Context) ([]Partition, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	if s.part == nil {
		return nil, invalid("Partitions: the store does not use the partitioned layout (Options.PartitionWidth)")
	}
	ps, err := s.part.partitions(ctx)
	if err != nil {
		return nil, opErr("partitions", err)
	}
	out := make([]Partition, len(ps))
	for i, pt := range ps {
		out[i] = Partition{Name: pt.name}
		if pt.from != minInt {
			out[i].From = time.UnixMicro(pt.from)
		}
		if pt.to != maxInt {
			out[i].To = time.UnixMicro(pt.to)
		}
	}
	return out, nil
}

// DropExpiredPartitions drops every partition that ended before the current period began and
// whose records all expired at least Options.PartitionMargin before now, and returns how many
// partitions it dropped and how many records they held. Each drop is its own short
// transaction: it locks the records table (waiting at most 2s: a long transaction on the
// table makes it retry at the next call), checks the newest expiry of the partition under
// that lock (so a claim, Extend or takeover cannot revive one of its records in between) and
// drops the partition. Sweep calls it in the partitioned layout; it fails with an error
// wrapping idem.ErrInvalidInput in the plain layout.
func (s *Store) DropExpiredPartitions(ctx context.Context, now time.Time) (partitions, records int, err error) {
	if err := s.ready(ctx); err != nil {
		return 0, 0, err
	}
	if s.part == nil {
		return 0, 0, invalid("DropExpiredPartitions: the store does not use the partitioned layout (Options.PartitionWidth)")
	}
	partitions, records, err = s.part.dropExpired(ctx, now)
	return partitions, records, opErr("drop partitions", err)
}

// maintain is Sweep in the partitioned layout: it creates the current and the next period's
// partitions and drops the expired ones, and returns how many records those held.
func (p *partitioning) maintain(ctx context.Context, now time.Time) (int, error) {
	b := p.bucket(now.UnixMicro())
	for _, bb := range []int64{b, b + 1} {
		if err := p.ensure(ctx, bb); err != nil {
			return 0, err
		}
	}
	_, n, err := p.dropExpired(ctx, now)
	return n, err
}

func (p *partitioning) dropExpired(ctx context.Context, now time.Time) (dropped, records int, err error) {
	ps, err := p.partitions(ctx)
	if err != nil {
		return 0, 0, err
	}
	current := p.bucket(now.UnixMicro()) * p.width
	cutoff := now.Add(-p.margin).UnixMicro()
	for _, pt := range ps {
		if pt.to > current {
			continue // the current period's, or a later one's: claims write into it
		}
		n, ok, err := p.dropIfExpired(ctx, pt.name, cutoff)
		if err != nil {
			return dropped, records, err
		}
		if ok {
			dropped++
			records += n
		}
	}
	return dropped, records, nil
}

// dropIfExpired drops the partition name if every record in it expired at cutoff (µs) or
// before, and returns how many rows it held.
func (p *partitioning) dropIfExpired(ctx context.Context, name string, cutoff int64) (rows int, ok bool, err error) {
	part := p.qualified(name)
	// Cheap refusal first, without a lock: most calls find the partition still live.
	var newest *int64
	if err := p.s.pool.QueryRow(ctx, `SELECT max(expires_at) FROM `+part).Scan(&newest); err != nil {
		if isUndefinedTable(err) {
			return 0, false, nil // dropped meanwhile by another process
		}
		return 0, false, err
	}
	if newest != nil && *newest > cutoff {
		return 0, false, nil
	}
	// Counted outside the lock (only the count reported depends on it); the drop decision is
	// taken under the lock below.
	var n int
	if err := p.s.pool.QueryRow(ctx, `SELECT count(*) FROM `+part).Scan(&n); err != nil {
		if isUndefinedTable(err) {
			return 0, false, nil
		}
		return 0, false, err
	}
	err = pgx.BeginFunc(ctx, p.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = `+strconv.Itoa(int(partitionLockTimeout.Milliseconds()))); err != nil {
			return err
		}
		// The parent first, as every query on it locks it before its partitions: the drop
		// takes this lock anyway, and taking it first keeps the order the same.
		if _, err := tx.Exec(ctx, `LOCK TABLE `+p.s.name+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, part).Scan(&exists); err != nil || !exists {
			return err
		}
		var newest *int64
		if err := tx.QueryRow(ctx, `SELECT max(expires_at) FROM `+part).Scan(&newest); err != nil {
			return err
		}
		if newest != nil && *newest > cutoff {
			return nil // revived since the first look: keep it
		}
		if _, err := tx.Exec(ctx, `DROP TABLE `+part); err != nil {
			return err
		}
		ok = true
		return nil
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available: next time
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("drop partition %s: %w", name, err)
	}
	if ok {
		p.mu.Lock()
		for b := range p.known {
			if p.partName(b) == name {
				delete(p.known, b)
			}
		}
		p.mu.Unlock()
	}
	return n, ok, nil
}

// SweepRows deletes at most batch expired records, as Sweep does in the plain layout: one
// DELETE found by the expires_at indexes, oldest first, skipping rows locked by a claim. In
// the partitioned layout it is for records that must go before their partition is dropped
// (the partitions' drop makes it unnecessary otherwise).
func (s *Store) SweepRows(ctx context.Context, now time.Time, batch int) (int, error) {
	if run, err := storeerr.SweepBatch(ctx, s.ready, "pgstore", batch); !run {
		return 0, err
	}
	return s.sweepRows(ctx, now, batch)
}
