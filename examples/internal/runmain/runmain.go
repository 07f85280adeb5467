// Package runmain runs an example's main function inside its test, as a reader runs it with
// `go run`: with the command-line arguments given, the services found through the environment
// variables the example documents, and its standard output captured for the test to check.
package runmain

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Run calls main with os.Args set to the program name followed by args, and returns what it
// wrote to standard output. It fails t when main has not returned after timeout (the example
// then waits forever for an effect that never comes). main may be called once per test binary:
// it defines its flags on the global flag set.
func Run(t *testing.T, timeout time.Duration, main func(), args ...string) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	oldOut, oldArgs := os.Stdout, os.Args
	os.Stdout, os.Args = w, append([]string{"example"}, args...)
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&out, r); close(copied) }()
	done := make(chan struct{})
	go func() { defer close(done); main() }()
	select {
	case <-done:
	case <-time.After(timeout):
		os.Stdout = oldOut
		t.Fatalf("main has not returned after %v", timeout)
	}
	os.Stdout, os.Args = oldOut, oldArgs
	w.Close()
	<-copied
	r.Close()
	t.Logf("output:\n%s", out.String())
	return out.String()
}

// Suffix returns a random suffix for the names of the tables, streams and queues of one run.
func Suffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// PostgresSchema creates a schema of its own for one run and returns pgURL with its
// search_path set to it, so that the example's fixed table names land in that schema; the
// schema is dropped when t ends. It also returns a pool on that schema for the test's queries.
func PostgresSchema(t *testing.T, pgURL string) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	schema := "example_" + Suffix()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgURL)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return u.String(), db
}

// ChargedOnce runs main with the example's PostgreSQL tables in a schema of their own (its
// URL in IDEM_POSTGRES_URL) and the other environment variables given as name, value pairs,
// then checks that main printed want and that the example_charges table holds one row for
// each of orders orders.
func ChargedOnce(t *testing.T, pgURL string, main func(), want string, orders int, env ...string) {
	t.Helper()
	url, db := PostgresSchema(t, pgURL)
	t.Setenv("IDEM_POSTGRES_URL", url)
	for i := 0; i+1 < len(env); i += 2 {
		t.Setenv(env[i], env[i+1])
	}
	if out := Run(t, 2*time.Minute, main); out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	var rows, distinct int
	if err := db.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT order_id) FROM example_charges").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != orders || distinct != orders {
		t.Errorf("%d charges of %d orders in PostgreSQL, want %d of %d", rows, distinct, orders, orders)
	}
}
