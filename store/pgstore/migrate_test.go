package pgstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/sqlmigrate/migratetest"
)

func TestMigrations(t *testing.T) {
	t.Parallel()
	migratetest.Run(t, pgstore.SchemaVersion, pgDB{pool(t)})
}

// TestVersionOfMissingSchema: a schema that does not exist holds no table: version 0.
func TestVersionOfMissingSchema(t *testing.T) {
	t.Parallel()
	fresh, err := pgstore.New(pool(t), pgstore.Options{Schema: "idem_no_such_schema", Table: "nothing"})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := fresh.Version(context.Background()); err != nil || v != 0 {
		t.Fatalf("Version of a missing table = %d, %v", v, err)
	}
}

// pgDB is migratetest.DB on the test schema.
type pgDB struct{ p *pgxpool.Pool }

func (d pgDB) store(table string) *pgstore.Store {
	st, err := pgstore.New(d.p, pgstore.Options{Schema: testSchema, Table: table})
	if err != nil {
		panic(err) // table names come from NewTable
	}
	return st
}

func (d pgDB) NewTable(t *testing.T) string {
	table := randomName("m_")
	t.Cleanup(func() { dropTable(t, d.p, testSchema, table) })
	return table
}

func (d pgDB) Migrate(ctx context.Context, table string) error { return d.store(table).Migrate(ctx) }

func (d pgDB) Version(ctx context.Context, table string) (int, error) {
	return d.store(table).Version(ctx)
}

func (d pgDB) Steps(ctx context.Context, table string) (n int, err error) {
	err = d.p.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.%q WHERE tbl = $1`, testSchema, pgstore.MigrationsTable), table).Scan(&n)
	return n, err
}

func (d pgDB) Record(ctx context.Context, table string, version int) error {
	_, err := d.p.Exec(ctx, fmt.Sprintf(`INSERT INTO %q.%q VALUES ($1, $2, 'future', 0)`, testSchema, pgstore.MigrationsTable), table, version)
	return err
}
