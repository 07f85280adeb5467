package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
)

// The schema is a numbered series of SQL files, migrations/NNNN_name.sql, applied in order.
// "{{table}}" in a file stands for the configured table name. Files are never edited once
// released: a change to the schema is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationsTable records, per records table (by its lower-case name), which schema versions
// have been applied.
const migrationsTable = "idem_migrations"

// migration is one schema step.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations is the parsed, ordered list of embedded migrations.
var migrations = mustLoadMigrations()

// SchemaVersion is the schema version this release writes and reads: the number of the last
// embedded migration. Open brings an older database up to it and refuses a newer one.
var SchemaVersion = migrations[len(migrations)-1].version

func mustLoadMigrations() []migration {
	ms, err := loadMigrations(migrationFiles)
	if err != nil {
		panic("sqlitestore: embedded migrations: " + err.Error())
	}
	return ms
}

// loadMigrations reads migrations/NNNN_name.sql from fsys; versions must run 1, 2, 3, ….
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, n := range names { // fs.Glob returns names in lexical order
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s: name is not NNNN_name.sql", n)
		}
		if v != len(ms)+1 {
			return nil, fmt.Errorf("%s: version %d, want %d", n, v, len(ms)+1)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(b)})
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("no migrations")
	}
	return ms, nil
}

// migrate brings table up to SchemaVersion in one write transaction (BEGIN IMMEDIATE on the
// writer), so two processes opening the same file at once apply each step exactly once: the
// second waits for the first's lock, then finds the work done.
func migrate(ctx context.Context, db *sql.DB, table string, now time.Time) (err error) {
	id := strings.ToLower(table)    // SQLite's names are case-insensitive: "T" and "t" are one table
	tx, err := db.BeginTx(ctx, nil) // the writer's DSN makes this BEGIN IMMEDIATE
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err = tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+migrationsTable+` (
		tbl        TEXT    NOT NULL,
		version    INTEGER NOT NULL,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL,
		PRIMARY KEY (tbl, version)
	)`); err != nil {
		return err
	}
	var current int
	if err = tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM `+migrationsTable+` WHERE tbl = ?`, id).Scan(&current); err != nil {
		return err
	}
	if current > SchemaVersion {
		return fmt.Errorf("table %s has schema version %d, newer than this release knows (%d): upgrade idem", table, current, SchemaVersion)
	}
	for _, m := range migrations[current:] {
		if _, err = tx.ExecContext(ctx, strings.ReplaceAll(m.sql, "{{table}}", table)); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
		if _, err = tx.ExecContext(ctx, `INSERT INTO `+migrationsTable+` (tbl, version, name, applied_at) VALUES (?, ?, ?, ?)`,
			id, m.version, m.name, now.UnixMicro()); err != nil {
			return fmt.Errorf("migration %s: %w", m.name, err)
		}
	}
	return tx.Commit()
}
