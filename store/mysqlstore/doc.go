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
// idem's versioned encoding (idem.EncodeResponse); keys are VARBINARY(512), compared byte for
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
