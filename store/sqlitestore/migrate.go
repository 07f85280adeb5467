package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/store/sqlmigrate"
)

// The schema is a numbered series of SQL files, migrations/NNNN_name.sql, applied in order by
// sqlmigrate. "{{table}}" in a file stands for the configured table name. Files are never
// edited once released: a change to the schema is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationsTable records, per records table (by its lower-case name), which schema versions
// have been applied.
const migrationsTable = "idem_migrations"

// migrations is the parsed, ordered list of embedded migrations.
var migrations = sqlmigrate.MustLoad(migrationFiles, "migrations")

// SchemaVersion is the schema version this release writes and reads: the number of the last
// embedded migration. Open brings an older database up to it and refuses a newer one with an
// error wrapping sqlmigrate.ErrNewerSchema.
var SchemaVersion = migrations[len(migrations)-1].Version

// migrate brings table up to SchemaVersion. The migration lock is one write transaction
// (BEGIN IMMEDIATE on the writer), so two processes opening the same file at once apply each
// step exactly once: the second waits for the first's lock, then finds the work done. Each
// step is a savepoint in it: applied whole, with its record, or not at all.
func migrate(ctx context.Context, db *sql.DB, table string, now time.Time) (sqlmigrate.Result, error) {
	t := &sqliteTarget{db: db, table: table, id: strings.ToLower(table), now: now}
	res, err := sqlmigrate.Run(ctx, t, migrations)
	if err != nil {
		return res, fmt.Errorf("migrate %s: %w", table, err)
	}
	return res, nil
}

// version returns the schema version applied to table, 0 if none, without creating anything.
func version(ctx context.Context, db *sql.DB, table string) (int, error) {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, migrationsTable).Scan(&n); err != nil || n == 0 {
		return 0, err
	}
	var v int
	err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM `+migrationsTable+` WHERE tbl = ?`, strings.ToLower(table)).Scan(&v)
	return v, err
}

// checkVersion fails unless table is at SchemaVersion: with an error wrapping
// sqlmigrate.ErrNoTable when it was never migrated, sqlmigrate.ErrNewerSchema when it is newer.
func checkVersion(ctx context.Context, db *sql.DB, table string) error {
	v, err := version(ctx, db, table)
	switch {
	case err != nil:
		return err
	case v == 0:
		return fmt.Errorf("%w %q", sqlmigrate.ErrNoTable, table)
	case v > SchemaVersion:
		return fmt.Errorf("%w: table %s is at version %d, this release knows up to %d", sqlmigrate.ErrNewerSchema, table, v, SchemaVersion)
	case v < SchemaVersion:
		return fmt.Errorf("table %s is at schema version %d, this release needs %d: migrate it first (idem migrate)", table, v, SchemaVersion)
	}
	return nil
}

// sqliteTarget is a sqlmigrate.Target on the writer. Lock begins the transaction that
// Version and Apply run in, and the unlock function commits it.
type sqliteTarget struct {
	db    *sql.DB
	tx    *sql.Tx
	table string
	id    string // SQLite's names are case-insensitive: "T" and "t" are one table
	now   time.Time
}

func (t *sqliteTarget) Lock(ctx context.Context) (func(context.Context) error, error) {
	tx, err := t.db.BeginTx(ctx, nil) // the writer's DSN makes this BEGIN IMMEDIATE
	if err != nil {
		return nil, err
	}
	t.tx = tx
	return func(context.Context) error { return tx.Commit() }, nil
}

func (t *sqliteTarget) Version(ctx context.Context) (int, error) {
	if _, err := t.tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+migrationsTable+` (
		tbl        TEXT    NOT NULL,
		version    INTEGER NOT NULL,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL,
		PRIMARY KEY (tbl, version)
	)`); err != nil {
		return 0, err
	}
	var v int
	err := t.tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM `+migrationsTable+` WHERE tbl = ?`, t.id).Scan(&v)
	return v, err
}

func (t *sqliteTarget) Apply(ctx context.Context, m sqlmigrate.Migration) (err error) {
	if _, err := t.tx.ExecContext(ctx, `SAVEPOINT idem_migration`); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			c := context.WithoutCancel(ctx)
			_, _ = t.tx.ExecContext(c, `ROLLBACK TO idem_migration`)
			_, _ = t.tx.ExecContext(c, `RELEASE idem_migration`)
		}
	}()
	if _, err := t.tx.ExecContext(ctx, sqlmigrate.Expand(m.SQL, map[string]string{"table": t.table})); err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(ctx, `INSERT INTO `+migrationsTable+` (tbl, version, name, applied_at) VALUES (?, ?, ?, ?)`,
		t.id, m.Version, m.Name, t.now.UnixMicro()); err != nil {
		return err
	}
	_, err = t.tx.ExecContext(ctx, `RELEASE idem_migration`)
	return err
}
