package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
)

// A call that waits for the database file's write lock, which another process's transaction
// holds, ends at its context's deadline rather than at the busy timeout (5s by default), with
// an error that says the deadline passed, and the store works again once the lock is free.
func TestCallEndsAtDeadline(t *testing.T) {
	t.Parallel()
	st := open(t, sqlitestore.Options{})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	now := time.Now()
	res, err := st.Reserve(ctx, "k", fp, now, time.Minute, time.Hour)
	if err != nil || !res.Claimed {
		t.Fatal(err)
	}
	// Another writer on the same file, as another process would be.
	other, err := sql.Open("sqlite", "file:"+st.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func(context.Context) error{
		"Reserve of a new key": func(ctx context.Context) error {
			_, err := st.Reserve(ctx, "new", fp, now, time.Minute, time.Hour)
			return err
		},
		"Complete": func(ctx context.Context) error {
			return st.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 200}, now, now.Add(time.Hour))
		},
	} {
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		err := call(cctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s behind another writer: %v, want an error matching context.DeadlineExceeded", name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s took %v, its deadline was 300ms", name, d)
		}
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 201}, now, now.Add(time.Hour)); err != nil {
		t.Fatalf("Complete once the lock is free: %v", err)
	}
}
