// Package sqlmigrate is the migration machinery the SQL stores (pgstore, mysqlstore,
// sqlitestore) share: a runner for versioned, embedded migrations.
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
package sqlmigrate
