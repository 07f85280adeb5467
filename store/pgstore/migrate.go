package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var migrations = sqlmigrate.MustLoad(migrationFiles, "migrations")

// SchemaVersion is the schema version this release writes and reads: the number of the last
// embedded migration (migrations/NNNN_name.sql).
var SchemaVersion = migrations[len(migrations)-1].Version

// MigrationsTable is the table, in the records table's schema, where Migrate records the
// applied schema version of each records table.
const MigrationsTable = "idem_migrations"

// migrateLockKey is the pg_advisory_lock key every idem migrator of a database takes: they
// serialize, so two processes creating the same (or the shared migrations) table do not race.
const migrateLockKey int64 = 0x1de3_0001

// Migrate brings the records table (and its schema, if named and missing) up to SchemaVersion.
// It is safe to run at every start: a second run is a no-op, and processes migrating at once
// serialize on a PostgreSQL advisory lock, each step applied once in its own transaction. It
// fails with an error wrapping sqlmigrate.ErrNewerSchema if the table is newer than this
// release.
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.MigrateVersions(ctx)
	return err
}

// MigrateVersions is Migrate, returning the table's schema version before and after (From 0:
// the table was created; From equal to To: it was up to date). It is what `idem migrate`
// reports.
func (s *Store) MigrateVersions(ctx context.Context) (sqlmigrate.Result, error) {
	if s.closed.Load() {
		return sqlmigrate.Result{}, idem.ErrClosed
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return sqlmigrate.Result{}, fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer conn.Release()
	var res sqlmigrate.Result
	if s.part != nil {
		res, err = s.part.migrate(ctx, conn)
	} else {
		res, err = sqlmigrate.Run(ctx, &pgTarget{s: s, conn: conn}, migrations)
	}
	if err != nil {
		return res, fmt.Errorf("pgstore: migrate %s: %w", s.name, err)
	}
	return res, nil
}

// Version returns the schema version applied to the records table, 0 if none.
func (s *Store) Version(ctx context.Context) (int, error) {
	if s.closed.Load() {
		return 0, idem.ErrClosed
	}
	var v int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+s.migrations+` WHERE tbl = $1`, s.opt.Table).Scan(&v)
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) && pgErr.SQLState() == "42P01" { // undefined_table: never migrated
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("pgstore: version: %w", err)
	}
	return v, nil
}

type pgTarget struct {
	s    *Store
	conn *pgxpool.Conn
}

func (t *pgTarget) Lock(ctx context.Context) (func(context.Context) error, error) {
	if _, err := t.conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrateLockKey); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		_, err := t.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, migrateLockKey)
		if err != nil {
			// The session still holds the lock: drop the connection rather than return it.
			_ = t.conn.Conn().Close(ctx)
		}
		return err
	}, nil
}

func (t *pgTarget) Version(ctx context.Context) (int, error) {
	if t.s.opt.Schema != "" {
		if _, err := t.conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{t.s.opt.Schema}.Sanitize()); err != nil {
			return 0, err
		}
	}
	if _, err := t.conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t.s.migrations+` (
		tbl        text    NOT NULL,
		version    integer NOT NULL,
		name       text    NOT NULL,
		applied_at bigint  NOT NULL,
		PRIMARY KEY (tbl, version)
	)`); err != nil {
		return 0, err
	}
	var v int
	err := t.conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+t.s.migrations+` WHERE tbl = $1`, t.s.opt.Table).Scan(&v)
	return v, err
}

func (t *pgTarget) Apply(ctx context.Context, m sqlmigrate.Migration) error {
	// PostgreSQL DDL is transactional: the step and its record commit together or not at all.
	return pgx.BeginFunc(ctx, t.conn, func(tx pgx.Tx) error {
		sql := sqlmigrate.Expand(m.SQL, map[string]string{
			"table":         t.s.name,
			"index":         pgx.Identifier{t.s.opt.Table + "_expires_at"}.Sanitize(),
			"created_index": pgx.Identifier{t.s.opt.Table + "_created_at"}.Sanitize(),
		})
		if _, err := tx.Exec(ctx, sql); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+t.s.migrations+` (tbl, version, name, applied_at) VALUES ($1, $2, $3, $4)`,
			t.s.opt.Table, m.Version, m.Name, time.Now().UnixMicro())
		return err
	})
}
