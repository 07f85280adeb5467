package mysqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlmigrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var migrations = sqlmigrate.MustLoad(migrationFiles, "migrations")

// SchemaVersion is the schema version this release writes and reads: the number of the last
// embedded migration (migrations/NNNN_name.sql).
var SchemaVersion = migrations[len(migrations)-1].Version

// MigrationsTable is the table, in the records table's database, where Migrate records the
// applied schema version of each records table.
const MigrationsTable = "idem_migrations"

// migrateLockTimeout is how long Migrate waits for another process's migration (GET_LOCK).
const migrateLockTimeout = 60 // seconds

// Migrate brings the records table (and its database, if Options.Database is set and
// missing) up to SchemaVersion. It is safe to run at every start: a second run is a no-op,
// and processes migrating at once serialize on GET_LOCK, so each step is applied once. MySQL
// DDL commits on its own, so a step interrupted half-way is simply run again (every step is
// written to be repeatable). It fails with an error wrapping sqlmigrate.ErrNewerSchema if the
// table is newer than this release.
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
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return sqlmigrate.Result{}, fmt.Errorf("mysqlstore: migrate: %w", err)
	}
	defer conn.Close()
	res, err := sqlmigrate.Run(ctx, &myTarget{s: s, conn: conn}, migrations)
	if err != nil {
		return res, fmt.Errorf("mysqlstore: migrate %s: %w", s.name, err)
	}
	return res, nil
}

// Version returns the schema version applied to the records table, 0 if none.
func (s *Store) Version(ctx context.Context) (int, error) {
	if s.closed.Load() {
		return 0, idem.ErrClosed
	}
	var v int
	err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM `+s.migrations+` WHERE tbl = ?`, s.opt.Table).Scan(&v)
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && (myErr.Number == 1146 || myErr.Number == 1049) { // no such table / database
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("mysqlstore: version: %w", err)
	}
	return v, nil
}

type myTarget struct {
	s    *Store
	conn *sql.Conn
}

func (t *myTarget) lockName() string { return "idem_migrate:" + t.s.opt.Database }

func (t *myTarget) Lock(ctx context.Context) (func(context.Context) error, error) {
	// GET_LOCK is server-wide: the name carries the database (or, for the connection's
	// default database, DATABASE()).
	var got sql.NullInt64
	if err := t.conn.QueryRowContext(ctx, `SELECT GET_LOCK(CONCAT(?, coalesce(DATABASE(), '')), ?)`,
		t.lockName(), migrateLockTimeout).Scan(&got); err != nil {
		return nil, err
	}
	if !got.Valid || got.Int64 != 1 {
		return nil, fmt.Errorf("another migration held the lock for %ds", migrateLockTimeout)
	}
	return func(ctx context.Context) error {
		_, err := t.conn.ExecContext(ctx, `SELECT RELEASE_LOCK(CONCAT(?, coalesce(DATABASE(), '')))`, t.lockName())
		if err != nil {
			// The session still holds the lock: drop the connection rather than reuse it.
			_ = t.conn.Raw(func(any) error { return errBadConn })
		}
		return err
	}, nil
}

func (t *myTarget) Version(ctx context.Context) (int, error) {
	if t.s.opt.Database != "" {
		if _, err := t.conn.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+quote(t.s.opt.Database)); err != nil {
			return 0, err
		}
	}
	if _, err := t.conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+t.s.migrations+` (
		tbl        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		version    INT          NOT NULL,
		name       VARCHAR(255) NOT NULL,
		applied_at BIGINT       NOT NULL,
		PRIMARY KEY (tbl, version)
	) ENGINE = InnoDB`); err != nil {
		return 0, err
	}
	var v int
	err := t.conn.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM `+t.s.migrations+` WHERE tbl = ?`, t.s.opt.Table).Scan(&v)
	return v, err
}

func (t *myTarget) Apply(ctx context.Context, m sqlmigrate.Migration) error {
	sql := sqlmigrate.Expand(m.SQL, map[string]string{
		"table":         t.s.name,
		"index":         quote(t.s.opt.Table + "_expires_at"),
		"created_index": quote(t.s.opt.Table + "_created_at"),
	})
	for _, stmt := range sqlmigrate.Statements(sql) {
		// MySQL DDL is not transactional, and MySQL has no ADD COLUMN IF NOT EXISTS: a
		// column or an index that exists was added by this step in a run that stopped before
		// recording it.
		if _, err := t.conn.ExecContext(ctx, stmt); err != nil && !isMySQLError(err, errDupFieldName) && !isMySQLError(err, errDupKeyName) {
			return err
		}
	}
	_, err := t.conn.ExecContext(ctx, `INSERT INTO `+t.s.migrations+` (tbl, version, name, applied_at) VALUES (?, ?, ?, ?)`,
		t.s.opt.Table, m.Version, m.Name, time.Now().UnixMicro())
	return err
}
