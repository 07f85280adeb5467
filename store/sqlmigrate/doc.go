// Package sqlmigrate is the small machinery the SQL stores (pgstore, mysqlstore) share:
// a runner for versioned, embedded migrations, and a Sweeper that deletes expired records on
// an interval.
//
// # Migrations
//
// A backend embeds files named NNNN_name.sql (0001, 0002, …, no gaps) and loads them with
// Load. Placeholders such as {{table}} are filled in by Expand. Run applies, under the
// backend's lock, every migration above the version the backend reports, in order, and
// records each; a second Run is a no-op and a schema newer than the files is refused with
// ErrNewerSchema. Released files are never edited: a schema change is a new file.
//
// The backend supplies the parts that differ per database through the Target interface:
// how to lock (pg_advisory_lock, GET_LOCK), where the applied version is kept, and how a step
// is applied (in a transaction where DDL is transactional).
//
// # Sweeping
//
// Records past their expires_at count as absent at once (idem's invariant 5), but their rows
// stay until deleted. A Sweeper calls a store's Sweep in bounded batches every Interval, with
// jitter so that many processes do not sweep in step, until a batch comes back short.
// Stop ends it and waits for it; no goroutine outlives Stop.
package sqlmigrate
