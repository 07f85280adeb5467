package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
)

// testSchema holds the tables of the tests, one (or more) per test, dropped at its end.
const testSchema = "idem_pgstore_test"

var (
	poolMu     sync.Mutex
	sharedPool *pgxpool.Pool
)

// TestMain checks, after every test has run, that no connection is still checked out of the
// shared pool and that no goroutine outlived its test.
func TestMain(m *testing.M) {
	code := m.Run()
	poolMu.Lock()
	if p := sharedPool; p != nil {
		// A connection whose query a deadline interrupted is closed in the background (pgx
		// cancels the query on the server first); give that a moment.
		for i := 0; i < 100 && p.Stat().AcquiredConns() != 0; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if n := p.Stat().AcquiredConns(); n != 0 {
			fmt.Fprintf(os.Stderr, "pgstore tests: %d connections still acquired at the end\n", n)
			code = 1
		}
		p.Close()
	}
	poolMu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "pgstore tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// pool returns the pool the tests share (at most 16 connections: the server is shared too).
func pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := testenv.PostgresURL(t)
	poolMu.Lock()
	defer poolMu.Unlock()
	if sharedPool == nil {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 16
		p, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		sharedPool = p
	}
	return sharedPool
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// newStore returns a migrated store on its own table in testSchema, dropped at the end of t.
func newStore(t testing.TB, opt pgstore.Options) *pgstore.Store {
	t.Helper()
	p := pool(t)
	if opt.Table == "" {
		opt.Table = randomName("t_")
	}
	if opt.Schema == "" {
		opt.Schema = testSchema
	}
	st, err := pgstore.New(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropTable(t, p, opt.Schema, opt.Table) })
	t.Cleanup(func() { _ = st.Close() }) // first: stops the workers of Options.GroupCommit
	return st
}

func dropTable(t testing.TB, p *pgxpool.Pool, schema, table string) {
	ctx := context.Background()
	if _, err := p.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %q.%q`, schema, table)); err != nil {
		t.Errorf("drop %s.%s: %v", schema, table, err)
	}
	if _, err := p.Exec(ctx, fmt.Sprintf(`DELETE FROM %q.%q WHERE tbl = $1`, schema, pgstore.MigrationsTable), table); err != nil {
		t.Errorf("forget %s.%s: %v", schema, table, err)
	}
}
