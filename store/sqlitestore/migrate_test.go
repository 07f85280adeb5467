package sqlitestore_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
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
	res, err := stores[3].Reserve(context.Background(), "k", fp, time.Now(), time.Minute, time.Hour)
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
	res, err := st.Reserve(ctx, "k", fp, time.Now(), time.Minute, time.Hour)
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
	if err == nil || !strings.Contains(err.Error(), "newer than this release") {
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
		res, err := st.Reserve(ctx, "same-key", fp, now, time.Minute, time.Hour)
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
