package mysqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/mysqlstore"
)

// testDatabase holds the tables of the tests, one (or more) per test, dropped at its end.
const testDatabase = "idem_mysqlstore_test"

var (
	dbMu     sync.Mutex
	sharedDB *sql.DB
)

// TestMain checks, after every test has run, that no connection is still in use and that no
// goroutine outlived its test.
func TestMain(m *testing.M) {
	code := m.Run()
	dbMu.Lock()
	if db := sharedDB; db != nil {
		if n := db.Stats().InUse; n != 0 {
			fmt.Fprintf(os.Stderr, "mysqlstore tests: %d connections still in use at the end\n", n)
			code = 1
		}
		_ = db.Close()
	}
	dbMu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "mysqlstore tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// db returns the handle the tests share (at most 16 connections: the server is shared too).
func db(t testing.TB) *sql.DB {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	dbMu.Lock()
	defer dbMu.Unlock()
	if sharedDB == nil {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		c, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		sharedDB = sql.OpenDB(c)
		sharedDB.SetMaxOpenConns(16)
		sharedDB.SetMaxIdleConns(16)
	}
	return sharedDB
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// newStore returns a migrated store on its own table in testDatabase, dropped at the end of t.
func newStore(t testing.TB, opt mysqlstore.Options) *mysqlstore.Store {
	t.Helper()
	d := db(t)
	if opt.Table == "" {
		opt.Table = randomName("t_")
	}
	if opt.Database == "" {
		opt.Database = testDatabase
	}
	st, err := mysqlstore.New(d, opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = st.Close()
		dropTable(t, d, opt.Database, opt.Table)
	})
	return st
}

func dropTable(t testing.TB, d *sql.DB, database, table string) {
	ctx := context.Background()
	if _, err := d.ExecContext(ctx, fmt.Sprintf("DROP TABLE IF EXISTS `%s`.`%s`", database, table)); err != nil {
		t.Errorf("drop %s.%s: %v", database, table, err)
	}
	if _, err := d.ExecContext(ctx, fmt.Sprintf("DELETE FROM `%s`.`%s` WHERE tbl = ?", database, mysqlstore.MigrationsTable), table); err != nil {
		t.Errorf("forget %s.%s: %v", database, table, err)
	}
}
