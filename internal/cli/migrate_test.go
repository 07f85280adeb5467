package cli

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/sqlmigrate"
)

// sqlStore is one SQL store under test: a store URL for a table, and a way to run SQL on its
// database.
type sqlStore struct {
	name  string
	url   func(table string) string
	exec  func(t *testing.T, query string, args ...any)
	exist func(t *testing.T, table string) bool // whether the records table exists
	dir   string                                // the store's migrations, in the source tree
	quote func(table string) string
	ph    func(n int) string // the n-th placeholder
}

func newTable(prefix string) string { return fmt.Sprintf("%s_%08x", prefix, rand.Uint32()) }

func sqliteStore(t *testing.T) sqlStore { return sqliteStoreAt(filepath.Join(t.TempDir(), "idem.db")) }

// sqliteStoreAt is the SQLite file at path.
func sqliteStoreAt(path string) sqlStore {
	db := func(t *testing.T) *sql.DB {
		d, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	return sqlStore{
		name: "sqlite",
		url:  func(table string) string { return "sqlite://" + path + "?table=" + table },
		exec: func(t *testing.T, q string, args ...any) {
			if _, err := db(t).Exec(q, args...); err != nil {
				t.Fatal(err)
			}
		},
		exist: func(t *testing.T, table string) bool {
			var n int
			if err := db(t).QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		},
		dir:   "sqlitestore",
		quote: func(s string) string { return s }, // sqlitestore expands {{table}} unquoted
		ph:    func(int) string { return "?" },
	}
}

func postgresStore(t *testing.T) sqlStore {
	base := testenv.PostgresURL(t)
	pool, err := pgxpool.New(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	s := sqlStore{
		name: "postgres",
		url:  func(table string) string { return base + sep + "table=" + table },
		exec: func(t *testing.T, q string, args ...any) {
			if _, err := pool.Exec(context.Background(), q, args...); err != nil {
				t.Fatal(err)
			}
		},
		exist: func(t *testing.T, table string) bool {
			var ok bool
			if err := pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			return ok
		},
		dir:   "pgstore",
		quote: func(s string) string { return `"` + s + `"` },
		ph:    func(n int) string { return fmt.Sprintf("$%d", n) },
	}
	return s
}

func mysqlStore(t *testing.T) sqlStore {
	dsn := testenv.MySQLDSN(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// root@tcp(host:port)/db → mysql://root@host:port/db
	user, rest, _ := strings.Cut(dsn, "@tcp(")
	hostport, dbname, _ := strings.Cut(rest, ")")
	base := "mysql://" + user + "@" + hostport + dbname
	return sqlStore{
		name: "mysql",
		url:  func(table string) string { return base + "?table=" + table },
		exec: func(t *testing.T, q string, args ...any) {
			for _, stmt := range sqlmigrate.Statements(q) {
				if _, err := db.Exec(stmt, args...); err != nil {
					t.Fatal(err)
				}
			}
		},
		exist: func(t *testing.T, table string) bool {
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`, table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		},
		dir:   "mysqlstore",
		quote: func(s string) string { return "`" + s + "`" },
		ph:    func(int) string { return "?" },
	}
}

// dropTable removes table and its migration rows when the test ends.
func (s sqlStore) dropTable(t *testing.T, table string) {
	t.Cleanup(func() {
		s.exec(t, `DROP TABLE IF EXISTS `+s.quote(table))
		if s.exist(t, "idem_migrations") {
			s.exec(t, `DELETE FROM idem_migrations WHERE tbl = `+s.ph(1), strings.ToLower(table))
		}
	})
}

// atVersion1 makes table as the store's first migration left it, recorded as version 1: the
// table of an older release.
func (s sqlStore) atVersion1(t *testing.T, table string) {
	t.Helper()
	other := newTable("idem_cli_other")
	s.dropTable(t, other)
	if code, out, errs := run(t, "migrate", "--store", s.url(other)); code != 0 {
		t.Fatalf("migrate %s: %d %s %s", other, code, out, errs) // creates idem_migrations
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "store", s.dir, "migrations", "0001_records.sql"))
	if err != nil {
		t.Fatal(err)
	}
	s.exec(t, sqlmigrate.Expand(string(b), map[string]string{"table": s.quote(table), "index": s.quote(table + "_expires_at")}))
	s.exec(t, `INSERT INTO idem_migrations (tbl, version, name, applied_at) VALUES (`+s.ph(1)+`, 1, '0001_records', 0)`, strings.ToLower(table))
}

// idem migrate says what it did: created the table, migrated it from an older version, or
// found it up to date.
func TestMigrateSaysWhatItDid(t *testing.T) {
	t.Parallel()
	for name, mk := range map[string]func(*testing.T) sqlStore{"sqlite": sqliteStore, "postgres": postgresStore, "mysql": mysqlStore} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := mk(t)
			fresh, old := newTable("idem_cli_fresh"), newTable("idem_cli_old")
			s.dropTable(t, fresh)
			s.dropTable(t, old)
			// The latest schema version is the store's number of migrations.
			files, err := filepath.Glob(filepath.Join("..", "..", "store", s.dir, "migrations", "*.sql"))
			if err != nil || len(files) < 3 {
				t.Fatalf("migrations of %s: %v %v", s.dir, files, err)
			}
			latest := fmt.Sprint(len(files))
			for _, step := range []struct{ table, want string }{
				{fresh, "created: schema version " + latest},
				{fresh, "up to date: schema version " + latest},
			} {
				if code, out, errs := run(t, "migrate", "--store", s.url(step.table)); code != 0 || strings.TrimSpace(out) != step.want {
					t.Fatalf("migrate %s: %d %q %q, want %q", step.table, code, out, errs, step.want)
				}
			}
			s.atVersion1(t, old)
			if code, out, errs := run(t, "migrate", "--store", s.url(old)); code != 0 || strings.TrimSpace(out) != "migrated from schema version 1 to "+latest {
				t.Fatalf("migrate of a version-1 table: %d %q %q", code, out, errs)
			}
		})
	}
}
