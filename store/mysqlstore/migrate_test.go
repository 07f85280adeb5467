package mysqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/sqlmigrate/migratetest"
)

func TestMigrations(t *testing.T) {
	t.Parallel()
	migratetest.Run(t, mysqlstore.SchemaVersion, myDB{db(t)})
}

// TestVersionOfMissingDatabase: a database that does not exist holds no table: version 0.
func TestVersionOfMissingDatabase(t *testing.T) {
	t.Parallel()
	fresh, err := mysqlstore.New(db(t), mysqlstore.Options{Database: "idem_no_such_db", Table: "nothing"})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := fresh.Version(context.Background()); err != nil || v != 0 {
		t.Fatalf("Version of a missing table = %d, %v", v, err)
	}
}

// myDB is migratetest.DB on the test database.
type myDB struct{ d *sql.DB }

func (m myDB) store(table string) *mysqlstore.Store {
	st, err := mysqlstore.New(m.d, mysqlstore.Options{Database: testDatabase, Table: table})
	if err != nil {
		panic(err) // table names come from NewTable
	}
	return st
}

func (m myDB) NewTable(t *testing.T) string {
	table := randomName("m_")
	t.Cleanup(func() { dropTable(t, m.d, testDatabase, table) })
	return table
}

func (m myDB) Migrate(ctx context.Context, table string) error { return m.store(table).Migrate(ctx) }

func (m myDB) Version(ctx context.Context, table string) (int, error) {
	return m.store(table).Version(ctx)
}

func (m myDB) Steps(ctx context.Context, table string) (n int, err error) {
	err = m.d.QueryRowContext(ctx, fmt.Sprintf("SELECT count(*) FROM `%s`.`%s` WHERE tbl = ?", testDatabase, mysqlstore.MigrationsTable), table).Scan(&n)
	return n, err
}

func (m myDB) Record(ctx context.Context, table string, version int) error {
	_, err := m.d.ExecContext(ctx, fmt.Sprintf("INSERT INTO `%s`.`%s` VALUES (?, ?, 'future', 0)", testDatabase, mysqlstore.MigrationsTable), table, version)
	return err
}
