package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/storetest"
)

// A call that waits for the database file's write lock, which another process's transaction
// holds, ends at its context's deadline rather than at the busy timeout (5s by default), with
// an error that says the deadline passed.
func TestCallEndsAtDeadline(t *testing.T) {
	t.Parallel()
	st := open(t, sqlitestore.Options{})
	storetest.CallsEndAtDeadline(t, st, func(string) func() {
		// Another writer on the same file, as another process would be.
		ctx := context.Background()
		other, err := sql.Open("sqlite", "file:"+st.Path())
		if err != nil {
			t.Fatal(err)
		}
		conn, err := other.Conn(ctx)
		if err != nil {
			other.Close()
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			conn.Close()
			other.Close()
			t.Fatal(err)
		}
		// The lock holds every write, a new key's claim too.
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := st.Reserve(cctx, idem.ReserveRequest{Key: "new", Fingerprint: idem.Fingerprint([]byte("x")), Now: time.Now(), Lease: time.Minute, TTL: time.Hour}); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Reserve of a new key behind another writer: %v, want an error matching context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Reserve of a new key took %v, its deadline was 300ms", d)
		}
		return func() {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
			other.Close()
		}
	})
}
