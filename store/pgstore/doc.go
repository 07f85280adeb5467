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
// in idem's versioned encoding (idem.EncodeResponse); keys are text COLLATE "C", compared byte
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
// A replay costs one round trip; it also locks the row for the length of the statement (which
// then commits like a write), so replays of one hot key take turns: the engine's
// Options.CacheSize serves hot replays without the store.
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
