// Package pgstore is an idem.Store in a PostgreSQL table (PostgreSQL 13 and later), on
// github.com/jackc/pgx/v5's pgxpool. Several processes share one database: idem itself stays
// stateless.
//
//	st, err := pgstore.Open(ctx, "postgres://user@host/db", pgstore.Options{})
//	if err != nil { … }
//	defer st.Close()
//	if err := st.Migrate(ctx); err != nil { … }   // at every start: a no-op when up to date
//	eng, err := idem.New(st, idem.Options{})
//
// Or on a pool the program already has: pgstore.New(pool, pgstore.Options{}).
//
// # Storage
//
// One row per scoped key in Options.Table (default idem_records), in Options.Schema (default:
// the search_path). Times are Unix microseconds in bigint columns; the response is one bytea
// in idem's versioned encoding (storekit.EncodeResponse); keys are text COLLATE "C", compared byte
// for byte (case-sensitive), up to idem.MaxStorageKeyLen bytes. A released claim keeps its row with
// expires_at = 0, so the next claim's fencing token is larger. An index on expires_at serves
// Sweep.
//
// # Round trips
//
// Reserve is one statement, so one round trip: an INSERT … ON CONFLICT (key) DO UPDATE …
// WHERE <expired, or stale lease with the same fingerprint> in a data-modifying CTE, and a
// SELECT … FOR SHARE of the conflicting row in the same statement when the update did not
// apply. That tells a new claim (attempts 1), a takeover (attempts > 1) and an existing record
// apart. Under READ COMMITTED the existing record returned is the latest version, the one the
// conflict locked, never an older one from the statement's snapshot; in the rare race where
// the blocking row is not in the snapshot at all, the statement runs again (a second round
// trip). Complete, Release, Extend, Get, Delete and each Sweep batch are one statement each.
// A replay costs one round trip and is a plain read: the statement first looks for a record
// completed and live in its snapshot (final until it expires) and, finding one, returns it
// without inserting, locking or writing anything, so it assigns no transaction id and has no
// commit to flush; only a claim, a takeover and a duplicate of a claim in progress lock the
// row.
//
// # Group commit
//
// With Options.GroupCommit set (the idem gateway's postgres:// URLs set it by default), the
// Reserve and Complete calls that arrive while others are being written share transactions:
// a worker sends every waiting call's statement in one round trip, in key order (so two
// transactions never deadlock), and commits them together. Each call gets the answer its own
// statement would have had, and only after the commit; if any statement fails, the whole
// transaction rolls back and every call in it gets the error. On a busy store this divides
// PostgreSQL's per-statement and per-commit work, and the round trips, among the calls;
// docs/benchmarks.md has the figures.
//
// # Same-transaction mode
//
// DoTx claims a key, runs the caller's writes and stores the response in ONE transaction:
// for effects that live in the same database it is exactly once, not merely at most once. A
// concurrent duplicate waits on the unique index until the first commits and then replays;
// a rollback leaves no trace. See DoTx for what it returns.
//
// # Migrations
//
// The schema is a numbered series of embedded files (migrations/NNNN_name.sql) applied by
// Migrate (and by `idem migrate`). The applied version of each records table is kept in
// MigrationsTable; migrators serialize on a PostgreSQL advisory lock and each step commits
// with its record, so running Migrate twice, or from several processes at once, is safe.
//
// # Retention
//
// Expired records count as absent at once; Sweep deletes them in bounded batches, oldest
// first via the expires_at index, skipping rows a claim holds (FOR UPDATE SKIP LOCKED), and
// StartSweeper runs it on an interval with jitter until stopped.
//
// # Partitioned layout
//
// A plain table swept row by row pays for each record twice: its INSERT, then its DELETE and
// the vacuum behind it. With Options.PartitionWidth set, the records table is instead
// partitioned by range on born, the time its row was written, one partition per period, and
// Sweep drops whole partitions (DropExpiredPartitions) and creates the next ones; no record is
// deleted row by row. The plain layout stays the default.
//
// PostgreSQL has no unique index across range partitions (a unique index must include the
// partition key), so the one-claim-per-key guarantee rests on the claim itself:
//
//   - Only Reserve writes rows. It sends two statements in one batch (one round trip, one
//     transaction): pg_advisory_xact_lock on a 64-bit hash of the key, then the claim. Claims
//     of one key therefore run one after another, whichever partition each writes into (their
//     clocks may sit on either side of a boundary), and each claim's snapshot, taken after the
//     lock was granted, sees the row the previous one committed. A hash collision only makes
//     two keys' claims wait for each other.
//   - The claim looks the key up in every partition (each has its own primary key on key),
//     locks the row it finds (FOR UPDATE returns its latest version), and decides exactly as
//     the plain layout does: absent, expired, or stale with the same fingerprint → a claim;
//     otherwise the existing record. A claim is written into the current period's partition
//     and, in the same statement, the key's row in an older partition is deleted. So a key
//     never has more than one row, and never two live claims.
//   - Complete, Release and Extend update that row in place, fenced on the token, wherever it
//     lives; Get, Delete and List read the parent table, which spans all partitions.
//
// A partition is dropped only when its period ended before the current one began and the
// newest expires_at in it is at least Options.PartitionMargin (default 10m, the allowance for
// clocks that run behind) before now. The check is made under an ACCESS EXCLUSIVE lock on the
// table, so no claim, takeover or Extend can revive one of its records between the check and
// the drop; and a claim in progress never expires before its lease ends (a claim writes the
// later of its TTL and its lease, Extend raises expires_at with the lease), so no holder's
// record is dropped while its lease runs.
//
// The costs: each claim probes the primary key of every partition (choose PartitionWidth
// between a quarter of the records' TTL and the whole TTL: a 24h TTL with 6h partitions
// keeps 5 to 6); the table holds TTL + width + margin worth of records before
// a partition goes; each drop locks the table for the milliseconds of the check and the drop,
// once per period, waiting at most 2s for the lock (a long DoTx on the table makes it retry
// at the next Sweep); a released or expired record keeps its row, counted as absent, until its
// partition goes (SweepRows deletes such rows one by one if needed). GroupCommit works in it:
// a group transaction sends each claim's lock and statement, in key order and for one key the
// claims before the completions (a claim takes the key's lock before its row, so must every
// transaction), and holds the locks until it commits; a transaction that finds a partition
// dropped since this process created it rolls back and runs again once the partition is
// created anew. DoTx works in it: the key's lock is held until the caller's transaction
// commits.
//
// Migrate converts a table of the plain layout in place: it adds born (0, a constant default:
// no rewrite) and a CHECK (born = 0) constraint, validates the constraint while the table stays
// in use, then in one short transaction renames the table to LegacyPartition(table), creates the
// partitioned table under the old name and attaches the old one as the partition of born < 1
// (the constraint spares ATTACH its scan). Every existing record keeps working and the old
// table is dropped whole once all its records expired. The partitioned layout's versions start
// at PartitionedVersionBase + 1, so a process still configured for the plain layout refuses
// the converted table at Migrate (sqlmigrate.ErrNewerSchema) and fails its claims closed:
// switch every process of the table to the partitioned layout together.
//
// # Failure
//
// Every error but the contract's sentinels means the store could not answer, and the engine
// fails closed. A statement timeout (statement_timeout) or a full pool surfaces as an error
// within the caller's deadline; after a server restart the pool reconnects by itself. A Store
// whose Close was called returns idem.ErrClosed, which matches idem.ErrStoreUnavailable.
//
// # Compatible engines
//
// The statements keep to SQL that CockroachDB and YugabyteDB also accept (ON CONFLICT … DO
// UPDATE … WHERE, data-modifying CTEs, FOR SHARE, FOR UPDATE SKIP LOCKED). Differences:
// CockroachDB runs SERIALIZABLE by default, where a conflicting claim may fail with a retryable
// serialization error (SQLSTATE 40001) instead of waiting, and its advisory locks may not be
// enforced, so run Migrate from one process there. Neither engine is tested here.
package pgstore
