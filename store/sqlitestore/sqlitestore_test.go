package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/sqlmigrate"
	"github.com/idemkit/idem/store/storetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	goleak.VerifyTestMain(m)
}

// open returns a store on a fresh file in t.TempDir(), closed at the end of the test.
func open(t testing.TB, opts sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) idem.Store { return open(t, sqlitestore.Options{}) })
}

// Reserve's paths depend on Options.KnownKeys; each combination passes the suite: always
// looking first (no hint), and a one-slot hint that is wrong most of the time.
func TestConformanceHints(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, 1} {
		t.Run(fmt.Sprintf("KnownKeys=%d", n), func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) idem.Store { return open(t, sqlitestore.Options{KnownKeys: n}) })
		})
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte("not a database "), 400), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path string
		opts       sqlitestore.Options
		is         error  // errors.Is target, if any
		contains   string // text the error must contain
	}{
		{"empty path", "", sqlitestore.Options{}, idem.ErrInvalidInput, "path is empty"},
		{"memory", ":memory:", sqlitestore.Options{}, idem.ErrInvalidInput, ":memory:"},
		{"uri", "file:x.db", sqlitestore.Options{}, idem.ErrInvalidInput, "file:x.db"},
		{"missing directory", filepath.Join(dir, "no", "such", "dir", "x.db"), sqlitestore.Options{}, fs.ErrNotExist, "no/such/dir"},
		{"parent is a file", filepath.Join(garbage, "x.db"), sqlitestore.Options{}, nil, "is not a directory"},
		{"path is a directory", dir, sqlitestore.Options{}, nil, dir},
		{"not a database", garbage, sqlitestore.Options{}, nil, "garbage.db"},
		{"bad table", filepath.Join(dir, "a.db"), sqlitestore.Options{Table: "x; DROP TABLE y"}, idem.ErrInvalidInput, "Options.Table"},
		{"table starting with a digit", filepath.Join(dir, "a.db"), sqlitestore.Options{Table: "1t"}, idem.ErrInvalidInput, "Options.Table"},
		{"reserved table", filepath.Join(dir, "a.db"), sqlitestore.Options{Table: "sqlite_master"}, idem.ErrInvalidInput, "Options.Table"},
		{"table name too long", filepath.Join(dir, "a.db"), sqlitestore.Options{Table: strings.Repeat("t", sqlmigrate.MaxNameLen+1)}, idem.ErrInvalidInput, "Options.Table"},
		{"migrations table", filepath.Join(dir, "a.db"), sqlitestore.Options{Table: "IDEM_migrations"}, idem.ErrInvalidInput, "Options.Table"},
		{"long table", filepath.Join(dir, "a.db"), sqlitestore.Options{Table: strings.Repeat("t", 65)}, idem.ErrInvalidInput, "Options.Table"},
		{"negative busy timeout", filepath.Join(dir, "a.db"), sqlitestore.Options{BusyTimeout: -time.Second}, idem.ErrInvalidInput, "Options.BusyTimeout"},
		{"negative readers", filepath.Join(dir, "a.db"), sqlitestore.Options{Readers: -1}, idem.ErrInvalidInput, "Options.Readers"},
		{"synchronous off", filepath.Join(dir, "a.db"), sqlitestore.Options{Synchronous: "OFF"}, idem.ErrInvalidInput, "Options.Synchronous"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, err := sqlitestore.Open(context.Background(), tc.path, tc.opts)
			if err == nil {
				st.Close()
				t.Fatal("Open succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not match %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("error %q does not mention %q", err, tc.contains)
			}
		})
	}
	// Nothing was created by the refused options.
	if _, err := os.Stat(filepath.Join(dir, "a.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused Open left a file behind: %v", err)
	}
}

func TestOptionsAccepted(t *testing.T) {
	t.Parallel()
	st := open(t, sqlitestore.Options{Table: "Tenant_42_records", BusyTimeout: time.Second, Readers: 1, Synchronous: "full"})
	if st.Table() != "Tenant_42_records" || !filepath.IsAbs(st.Path()) {
		t.Errorf("Table %q Path %q", st.Table(), st.Path())
	}
	res, err := st.Reserve(context.Background(), idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("Reserve: %v %+v", err, res)
	}
}

// A path with characters that mean something in a URI is still a plain path.
func TestOddPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a dir?with#odd%20chars")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "idem?.db")
	st, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Reserve(context.Background(), idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database not at the given path: %v", err)
	}
}

var fp = idem.Fingerprint([]byte("request"))

// rawDB opens the store's file directly, to damage it as a bug or a disk might.
func rawDB(t testing.TB, st *sqlitestore.Store) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", st.Path()+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestCorruptRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := time.Now()
	cases := []struct {
		name, update string
	}{
		{"garbage response", `UPDATE idem_records SET response = x'ff0001' WHERE key = ?`},
		{"truncated response", `UPDATE idem_records SET response = substr(response, 1, 4) WHERE key = ?`},
		{"empty response", `UPDATE idem_records SET response = x'' WHERE key = ?`},
		{"completed without response", `UPDATE idem_records SET response = NULL WHERE key = ?`},
		{"response as text", `UPDATE idem_records SET response = 'hello' WHERE key = ?`},
		{"unknown state", `UPDATE idem_records SET state = 7 WHERE key = ?`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := open(t, sqlitestore.Options{})
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !res.Claimed {
				t.Fatal(err)
			}
			resp := idem.Response{Status: 201, Header: map[string][]string{"A": {"b"}}, Body: []byte("body")}
			if err := st.Complete(ctx, "k", res.Record.Token, resp, now, now.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if _, err := rawDB(t, st).Exec(tc.update, "k"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Get(ctx, "k"); !errors.Is(err, idem.ErrCorruptRecord) {
				t.Errorf("Get: %v, want ErrCorruptRecord", err)
			}
			if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); !errors.Is(err, idem.ErrCorruptRecord) {
				t.Errorf("Reserve: %v, want ErrCorruptRecord", err)
			}
			// Through the engine: fail closed, the effect does not run.
			eng, err := idem.New(st, idem.Options{Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			_, err = eng.Do(ctx, "k", fp, func(context.Context) (idem.Response, error) {
				t.Error("effect ran over a corrupt record")
				return idem.Response{}, nil
			})
			if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, idem.ErrCorruptRecord) {
				t.Errorf("Do: %v, want a store error wrapping ErrCorruptRecord", err)
			}
		})
	}
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	st := open(t, sqlitestore.Options{})
	ctx := context.Background()
	for _, d := range [][2]time.Duration{{0, time.Hour}, {time.Minute, 0}, {-time.Minute, time.Hour}} {
		if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: d[0], TTL: d[1]}); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("Reserve with lease %s window %s: %v, want ErrInvalidInput", d[0], d[1], err)
		}
	}
	if _, err := st.Get(ctx, "k"); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("a refused Reserve left a record: %v", err)
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	st := open(t, sqlitestore.Options{})
	ctx := context.Background()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{}
	_, checks["Reserve"] = st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	checks["Complete"] = st.Complete(ctx, "k", 1, idem.Response{}, time.Now(), time.Now())
	checks["Release"] = st.Release(ctx, "k", 1)
	checks["Extend"] = st.Extend(ctx, "k", 1, time.Now())
	_, checks["Get"] = st.Get(ctx, "k")
	_, checks["Sweep"] = st.Sweep(ctx, time.Now(), 10)
	checks["Delete"] = st.Delete(ctx, "k")
	for op, err := range checks {
		if !errors.Is(err, idem.ErrClosed) || !errors.Is(err, idem.ErrStoreUnavailable) {
			t.Errorf("%s after Close: %v, want ErrClosed (ErrStoreUnavailable)", op, err)
		}
	}
	if err := st.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Close while calls are in flight: every call either succeeds or fails cleanly.
func TestCloseRacesCalls(t *testing.T) {
	t.Parallel()
	st := open(t, sqlitestore.Options{})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("k-%d-%d", g, i)
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
				if err != nil {
					if !errors.Is(err, idem.ErrStoreUnavailable) {
						t.Errorf("Reserve during Close: %v, want ErrStoreUnavailable", err)
					}
					return
				}
				err = st.Complete(ctx, key, res.Record.Token, idem.Response{Status: 200}, time.Now(), time.Now().Add(time.Hour))
				if err != nil && !errors.Is(err, idem.ErrStoreUnavailable) {
					t.Errorf("Complete during Close: %v, want ErrStoreUnavailable", err)
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	if err := st.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	wg.Wait()
}
