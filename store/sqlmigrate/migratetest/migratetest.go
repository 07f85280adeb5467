// Package migratetest is the migration suite every SQL store passes: pgstore, mysqlstore and
// sqlitestore each implement DB on their own database and call Run.
//
//	func TestMigrations(t *testing.T) {
//		migratetest.Run(t, pgstore.SchemaVersion, pgDB{pool: pool(t)})
//	}
//
// It checks that a table never migrated is at version 0, that a migration brings it to the
// backend's SchemaVersion recording each step once, that a second run is a no-op, that many
// migrators racing on one new table apply each step once, that a schema newer than the
// release is refused with an error wrapping sqlmigrate.ErrNewerSchema, and that the tables of
// one database are versioned apart.
package migratetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/store/sqlmigrate"
)

// DB is one SQL store's migrations on one test database, addressed by records table name.
type DB interface {
	// NewTable returns the name of a records table that does not exist yet, and registers its
	// removal (with its migration rows) with t.Cleanup.
	NewTable(t *testing.T) string
	// Migrate brings table up to the backend's schema version, as the store's own migration
	// (Migrate, or Open for sqlitestore) does, each call as if from its own process.
	Migrate(ctx context.Context, table string) error
	// Version returns the schema version recorded for table, 0 when it was never migrated.
	Version(ctx context.Context, table string) (int, error)
	// Steps returns how many migration rows are recorded for table.
	Steps(ctx context.Context, table string) (int, error)
	// Record records version as applied to table, as a later release would have.
	Record(ctx context.Context, table string, version int) error
}

// Run runs the suite against db, whose backend's last migration is schemaVersion.
func Run(t *testing.T, schemaVersion int, db DB) {
	ctx := func(t *testing.T) context.Context {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		return c
	}
	migrated := func(t *testing.T, c context.Context, table string) {
		t.Helper()
		if v, err := db.Version(c, table); err != nil || v != schemaVersion {
			t.Fatalf("Version(%s) = %d, %v; want %d", table, v, err, schemaVersion)
		}
		if n, err := db.Steps(c, table); err != nil || n != schemaVersion {
			t.Fatalf("%d migration rows for %s, %v; want %d (each step once)", n, table, err, schemaVersion)
		}
	}
	t.Run("NeverMigratedIsVersion0", func(t *testing.T) {
		t.Parallel()
		c := ctx(t)
		if v, err := db.Version(c, fmt.Sprintf("never_%08x", rand.Uint32())); err != nil || v != 0 {
			t.Fatalf("Version of a table never migrated = %d, %v; want 0", v, err)
		}
	})
	t.Run("MigrateOnceThenNoOp", func(t *testing.T) {
		t.Parallel()
		c, table := ctx(t), db.NewTable(t)
		for range 2 {
			if err := db.Migrate(c, table); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			migrated(t, c, table)
		}
	})
	t.Run("ConcurrentMigrators", func(t *testing.T) {
		t.Parallel()
		c, table := ctx(t), db.NewTable(t)
		const migrators = 8
		var wg sync.WaitGroup
		errs := make(chan error, migrators)
		for range migrators {
			wg.Go(func() { errs <- db.Migrate(c, table) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("concurrent Migrate: %v", err)
			}
		}
		migrated(t, c, table)
	})
	t.Run("RefusesNewerSchema", func(t *testing.T) {
		t.Parallel()
		c, table := ctx(t), db.NewTable(t)
		if err := db.Migrate(c, table); err != nil {
			t.Fatal(err)
		}
		if err := db.Record(c, table, schemaVersion+1); err != nil {
			t.Fatal(err)
		}
		if err := db.Migrate(c, table); !errors.Is(err, sqlmigrate.ErrNewerSchema) {
			t.Fatalf("Migrate of a newer schema = %v, want an error wrapping sqlmigrate.ErrNewerSchema", err)
		}
	})
	t.Run("TablesApart", func(t *testing.T) {
		t.Parallel()
		c, a, b := ctx(t), db.NewTable(t), db.NewTable(t)
		if err := db.Migrate(c, a); err != nil {
			t.Fatal(err)
		}
		if v, err := db.Version(c, b); err != nil || v != 0 {
			t.Fatalf("Version of another table after migrating %s = %d, %v; want 0", a, v, err)
		}
		if err := db.Record(c, a, schemaVersion+1); err != nil {
			t.Fatal(err)
		}
		if err := db.Migrate(c, b); err != nil {
			t.Fatalf("Migrate of %s while %s is newer: %v", b, a, err)
		}
		migrated(t, c, b)
	})
}
