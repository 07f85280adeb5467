// Package sqlitestore is idem's embedded default store: an idem.Store in one SQLite file,
// through the pure-Go driver modernc.org/sqlite (no cgo, no server).
//
//	st, err := sqlitestore.Open(ctx, "/var/lib/myapp/idem.db", sqlitestore.Options{})
//	if err != nil { … }
//	defer st.Close()
//	eng, err := idem.New(st, idem.Options{})
//
// # The file
//
// Open creates the file if needed, puts it in WAL mode (readers never block the writer nor
// each other) and brings its schema up to SchemaVersion. Records live in one table, by
// default "idem_records" (Options.Table); times are stored as Unix microseconds and a
// completed response as one BLOB in idem's versioned encoding (storekit.EncodeResponse), so any
// later release reads what an earlier one wrote.
//
// # Schema versions
//
// The schema is a series of numbered SQL files embedded in the package and applied in order
// by store/sqlmigrate, as for the other SQL stores, each recorded in the table
// idem_migrations (per records table), all in one write transaction. Two processes opening
// one file at once apply each step once: the second waits for the first's lock
// (Options.BusyTimeout) and finds the work done. A file whose schema is newer than this
// release knows is refused with an error wrapping sqlmigrate.ErrNewerSchema rather than
// misread. Migrate applies
// the migrations without keeping the store open, for deployment scripts (`idem migrate`).
//
// # Claims
//
// Reserve is one atomic statement, whatever the concurrency, within one process or across
// several sharing the file:
//
//	INSERT … ON CONFLICT (key) DO UPDATE SET … WHERE <expired, or in progress with its lease
//	run out and the same fingerprint> RETURNING token, attempts, created_at
//
// It either claims (a new record, a record past its TTL, or a takeover whose token is
// storekit.NextToken of the previous one) or writes nothing. Complete, Release and Extend are
// single UPDATEs fenced on the claim's token; Release expires the record rather than
// deleting it, so the next claim's token is larger. Reserve also looks at the record without
// the write lock, first for keys it has seen existing, after the claim for others: a replay
// or an in-flight duplicate of a key it knows is answered from a reader connection and never
// waits for the writer, while a new key costs exactly the claim. When most keys it does not
// know turn out to exist (after a restart, or with more live keys than Options.KnownKeys), it
// looks first for those too, so replays stay off the writer. See Store.Reserve.
//
// # Connections and throughput
//
// All writes go through one connection (SQLite admits one writer at a time; queueing in Go
// is cheaper than SQLite's busy-wait), reads through Options.Readers connections. On a
// two-core machine the store sustained about twelve thousand new keys (claim and completion)
// and over a hundred thousand replays a second, within ten percent of the bare driver running
// the same statements; docs/bench/sqlite.md has the figures and the command.
//
// # Same-transaction mode
//
// DoTx, and TxRunner for idemhttp (TxFromContext gives the handler its *sql.Tx), claim a
// key, run the caller's writes and store the response in ONE transaction: for effects whose
// tables live in the same file it is exactly once, not merely at most once. A concurrent
// duplicate waits until the first commits and then replays; a rollback, a panic or a killed
// process leaves no trace and the retry executes.
//
// The transaction is SERIALIZABLE, as every SQLite write transaction is: it begins with BEGIN
// IMMEDIATE on the store's writer connection, which takes the file's single write lock at
// once and holds it until COMMIT. The claim, the caller's reads and writes and the completion
// see and change the database as if alone; nothing can deadlock or fail to serialize, so
// nothing is retried.
//
// What that means: transactions run one at a time. A running function holds up every other
// transaction and every write the engine makes on this store (claims, completions), in this
// process and in the others sharing the file; reads (Get, an engine's replays, a DoTx of a
// completed key) go on, from reader connections (WAL). Keep the function to the database
// work. The business tables must be in the store's file, since the transaction is on the
// store's own connection.
//
// How a duplicate waits: a completed key is answered from a reader, without the write lock.
// Otherwise the duplicate waits for the writer connection in this process (database/sql
// queues the callers), or for the write lock when another process holds it (SQLite's busy
// handler polls, up to Options.BusyTimeout). DoTx waits for its context and the busy
// timeout; TxRunner ends the wait at TxOptions.Wait or its context's deadline with
// idem.ErrInFlight. The wait is for the write lock, not the key: while one transaction runs,
// requests with other keys wait too, and may get idem.ErrInFlight if it lasts.
//
// A process killed mid-transaction leaves nothing: its changes never reached a commit record,
// so readers ignore them and the next writer overwrites them, and the operating system
// releases its lock.
//
// # Durability
//
// By default the writer runs with synchronous=NORMAL: a completed record survives a crash
// of the process, but the last commits before a power loss or an operating system crash may
// be lost, and a retry would then run the effect again. Options.Synchronous "FULL" syncs
// every commit, at a cost in write throughput.
//
// # Several processes
//
// Processes on one machine may share the file: each claim is one atomic statement, so a key
// is claimed once overall (the package's tests run several processes on one file and count).
// The file must be on a local file system; SQLite's locking is not reliable over network
// file systems. Services on several machines want a shared store (pgstore, redisstore,
// dynamostore) instead.
//
// # Housekeeping
//
// Expired records count as absent at once but stay in the file until Sweep deletes them, in
// short batches that never hold the write lock for long. Call it periodically (the idem
// command's `sweep` does). Delete removes one record outright, for operators.
//
// # Errors
//
// Bad options and arguments return errors wrapping idem.ErrInvalidInput that name the field.
// A file that cannot be opened, or is not a database, fails Open with an error naming the
// path. A stored response that cannot be decoded returns an error wrapping
// idem.ErrCorruptRecord, never a panic, and the engine fails closed. A closed store returns
// idem.ErrClosed, which matches idem.ErrStoreUnavailable.
package sqlitestore
