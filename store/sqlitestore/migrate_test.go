package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/sqlmigrate"
	"github.com/idemkit/idem/store/sqlmigrate/migratetest"
)

// versions returns the schema versions recorded for table, in order.
func versions(t *testing.T, st *sqlitestore.Store, table string) []int {
	t.Helper()
	rows, err := rawDB(t, st).Query(`SELECT version FROM idem_migrations WHERE tbl = ? ORDER BY version`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	return vs
}

func wantVersions(t *testing.T, got []int) {
	t.Helper()
	if len(got) != sqlitestore.SchemaVersion {
		t.Fatalf("recorded versions %v, want 1..%d once each", got, sqlitestore.SchemaVersion)
	}
	for i, v := range got {
		if v != i+1 {
			t.Fatalf("recorded versions %v, want 1..%d once each", got, sqlitestore.SchemaVersion)
		}
	}
}

// Many stores opening one fresh file at once: each migration step is applied once, and all
// of them work.
func TestMigrateConcurrentOpen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	const n = 8
	stores := make([]*sqlitestore.Store, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	wantVersions(t, versions(t, stores[0], sqlitestore.DefaultTable))
	res, err := stores[3].Reserve(context.Background(), idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("Reserve: %v %+v", err, res)
	}
	for i, st := range stores {
		if rec, err := st.Get(context.Background(), "k"); err != nil || rec.Token != res.Record.Token {
			t.Errorf("store %d Get: %v %+v", i, err, rec)
		}
	}
}

// Reopening a migrated file changes nothing and keeps the records.
func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	if err := sqlitestore.Migrate(ctx, path, sqlitestore.Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatal(err)
	}
	st.Close()
	for range 3 {
		if err := sqlitestore.Migrate(ctx, path, sqlitestore.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	st, err = sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	wantVersions(t, versions(t, st, sqlitestore.DefaultTable))
	if rec, err := st.Get(ctx, "k"); err != nil || rec.Token != res.Record.Token {
		t.Errorf("record after reopening: %v %+v", err, rec)
	}
}

// A file migrated by a later release is refused rather than misread.
func TestMigrateRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	st := open(t, sqlitestore.Options{})
	if _, err := rawDB(t, st).Exec(`INSERT INTO idem_migrations (tbl, version, name, applied_at) VALUES (?, ?, 'future', 0)`,
		sqlitestore.DefaultTable, sqlitestore.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err := sqlitestore.Open(context.Background(), st.Path(), sqlitestore.Options{})
	if !errors.Is(err, sqlmigrate.ErrNewerSchema) {
		t.Fatalf("Open of a newer schema: %v, want a refusal", err)
	}
}

// Tables in one file are separate stores, each with its own schema version.
func TestTablesShareFile(t *testing.T) {
	t.Parallel()
	a := open(t, sqlitestore.Options{Table: "tenant_a"})
	b, err := sqlitestore.Open(context.Background(), a.Path(), sqlitestore.Options{Table: "tenant_b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, now := context.Background(), time.Now()
	for _, st := range []idem.Store{a, b} {
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "same-key", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatalf("Reserve in each table: %v %+v", err, res)
		}
	}
	wantVersions(t, versions(t, a, "tenant_a"))
	wantVersions(t, versions(t, a, "tenant_b"))

	// SQLite's names ignore case: "TENANT_A" is tenant_a, already migrated.
	c, err := sqlitestore.Open(context.Background(), a.Path(), sqlitestore.Options{Table: "TENANT_A"})
	if err != nil {
		t.Fatalf("Open with the table name in another case: %v", err)
	}
	defer c.Close()
	if rec, err := c.Get(ctx, "same-key"); err != nil || rec.State != idem.StateInProgress {
		t.Errorf("record through the other case: %v %+v", err, rec)
	}
}

func TestMigrations(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	migratetest.Run(t, sqlitestore.SchemaVersion, sqliteDB{path: path, raw: raw})
}

// sqliteDB is migratetest.DB on one file; the file goes with the test's directory.
type sqliteDB struct {
	path string
	raw  *sql.DB
}

func (sqliteDB) NewTable(*testing.T) string { return fmt.Sprintf("m_%08x", rand.Uint32()) }

func (d sqliteDB) Migrate(ctx context.Context, table string) error {
	return sqlitestore.Migrate(ctx, d.path, sqlitestore.Options{Table: table})
}

func (d sqliteDB) Version(ctx context.Context, table string) (v int, err error) {
	err = d.raw.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM idem_migrations WHERE tbl = ?`, table).Scan(&v)
	if err != nil && strings.Contains(err.Error(), "no such table") {
		return 0, nil // nothing was ever migrated in this file
	}
	return v, err
}

func (d sqliteDB) Steps(ctx context.Context, table string) (n int, err error) {
	err = d.raw.QueryRowContext(ctx, `SELECT count(*) FROM idem_migrations WHERE tbl = ?`, table).Scan(&n)
	return n, err
}

func (d sqliteDB) Record(ctx context.Context, table string, version int) error {
	_, err := d.raw.ExecContext(ctx, `INSERT INTO idem_migrations (tbl, version, name, applied_at) VALUES (?, ?, 'future', 0)`, table, version)
	return err
}
