// Package mysqlstore is an idem.Store in a MySQL (8.0 and later) or MariaDB
// InnoDB table, on github.com/go-sql-driver/mysql. Several processes share one database.
//
//	st, err := mysqlstore.Open(ctx, "user:pass@tcp(host:3306)/db", mysqlstore.Options{})
//	if err != nil { … }
//	defer st.Close()
//	if err := st.Migrate(ctx); err != nil { … }   // at every start: a no-op when up to date
//	eng, err := idem.New(st, idem.Options{})
//
// Or on a *sql.DB the program already has: mysqlstore.New(db, mysqlstore.Options{}).
//
// # Storage
//
// One row per scoped key in Options.Table (default idem_records), in Options.Database (default:
// the DSN's). Times are Unix microseconds in BIGINT columns; the response is one LONGBLOB in
// idem's versioned encoding (storekit.EncodeResponse); keys are VARBINARY(512), compared byte for
// byte (case-sensitive) whatever the server's collation. A released claim keeps its row with
// expires_at = 0, so the next claim's fencing token is larger. An index on expires_at serves
// Sweep. The server's max_allowed_packet must exceed the largest response stored (MySQL 8
// defaults to 64 MiB, MariaDB to 16 MiB).
//
// # Round trips
//
// MySQL has no RETURNING on an upsert, so Reserve is a short loop of statements, each atomic
// on its own, in autocommit (see Store.Reserve): a replay or an in-flight answer is one
// round trip (a SELECT of the row); a new claim two (the SELECT, then an INSERT guarded by
// the primary key); a takeover or a claim over an expired record two (the SELECT, then an
// UPDATE that is a compare-and-swap on the version read). A race restarts the loop. Each
// statement is prepared once per connection, so executing it is one round trip. Complete,
// Release, Get, Delete and each Sweep batch are one statement each; Extend is one, plus a
// SELECT when it changed nothing (the same lease set twice).
//
// # Same-transaction mode
//
// DoTx, and TxRunner for idemhttp (TxFromContext gives the handler its *sql.Tx), claim a
// key, run the caller's writes and store the response in ONE transaction: for effects that
// live in the same database it is exactly once, not merely at most once. A concurrent
// duplicate waits on the key's row until the first commits and then replays; a rollback, a
// panic or a killed process leaves no trace and the retry executes.
//
// A new key costs two round trips more than the caller's own transaction would: START
// TRANSACTION; the claim, one INSERT; the caller's statements; the completion, one UPDATE
// fenced on the claim's token; COMMIT. (The driver sends START TRANSACTION and COMMIT of a
// *sql.Tx alone, and the claim must come before the caller's statements and the completion
// after them, so none of these can share a round trip.) A replay costs START TRANSACTION,
// the INSERT that fails as a duplicate, a locking read of the record and a ROLLBACK.
//
// The transaction runs at the session's isolation level, as db.BeginTx(ctx, nil) gives
// (InnoDB's REPEATABLE READ unless the server or the DSN sets transaction_isolation). The claim
// INSERTs the key's row first. A concurrent INSERT of the same key waits on the primary key
// until the first transaction ends, then fails as a duplicate, keeping a shared lock on the
// row, and a locking read (LOCK IN SHARE MODE) sees the committed record; or, if the first
// rolled back, it succeeds. These are record locks on the key's row, at every level: the
// claim reads no absent key, so it takes no gap lock and adds no deadlocks between different
// keys. Duplicates that waited for a transaction that rolled back may deadlock on the gap
// the vanished row leaves; InnoDB ends all but one, which claims the key, and the others are
// run again (below) and wait for it. With binary logging on, writes under READ COMMITTED
// need binlog_format ROW or MIXED (MySQL 8's default is ROW, MariaDB's MIXED); under
// STATEMENT they fail with error 1665.
//
// Waits: a duplicate holds a pool connection while it waits. DoTx waits up to the server's
// innodb_lock_wait_timeout (50s by default), then returns an *idem.StoreError (error 1205).
// TxRunner ends the wait at TxOptions.Wait or the context's deadline with idem.ErrInFlight,
// on time. It bounds the server's side of the wait to end a little before the time left, in
// whole seconds rounded down, so the server's lock wait timeout ends it: a client that gave up
// first would close its connection, and MariaDB then goes on waiting for the lock until the
// holder's transaction ends. With less than about a second left, MariaDB tries the claim
// without waiting, again and again, until the time is out; MySQL waits its least, one second,
// and a caller whose deadline comes sooner leaves that wait behind on the server. On MariaDB
// the bound is part of each claim statement (SET STATEMENT innodb_lock_wait_timeout = n FOR
// …, sent as text), at no cost in round trips; on MySQL, which has no such form for InnoDB's
// setting, the session's innodb_lock_wait_timeout is set before the transaction and given
// back after the claim, two round trips more. The caller's statements run with the session's
// own setting either way. An
// engine's Reserve of a key a transaction holds waits on its row in the same way, so keep the
// transaction short.
//
// Deadlocks (error 1213) roll the whole transaction back: DoTx runs it again, up to five
// times; TxRunner only while its function has not run. The records table adds no deadlocks
// of its own between different keys: each claim locks its key's row alone.
//
// # MySQL and MariaDB
//
// Tested on MariaDB 10.11; the statements are written for MySQL 8 too, and avoid what
// differs between them: no INSERT … ON DUPLICATE KEY UPDATE (whose VALUES() is deprecated in
// MySQL 8.0.20 and whose row alias MariaDB lacks), no assignment that reads a column assigned
// before it in the same statement (MySQL assigns left to right, MariaDB's
// SIMULTANEOUS_ASSIGNMENT mode does not), no dependence on the DSN's clientFoundRows or
// interpolateParams. Differences left: EXPLAIN output, and MariaDB's smaller default
// max_allowed_packet.
//
// # Migrations
//
// The schema is a numbered series of embedded files (migrations/NNNN_name.sql) applied by
// Migrate (and by `idem migrate`). The applied version of each records table is kept in
// MigrationsTable; migrators serialize on GET_LOCK. MySQL DDL commits on its own, so each step
// is written to be safe to run again (CREATE TABLE IF NOT EXISTS, indexes inline).
//
// # Retention
//
// Expired records count as absent at once; Sweep deletes them in bounded batches with DELETE
// … WHERE expires_at <= now ORDER BY expires_at LIMIT n, which walks the expires_at index,
// and StartSweeper runs it on an interval with jitter until stopped.
//
// # Failure
//
// Every error but the contract's sentinels means the store could not answer, and the engine
// fails closed. A Store whose Close was called returns idem.ErrClosed, which matches
// idem.ErrStoreUnavailable.
package mysqlstore
