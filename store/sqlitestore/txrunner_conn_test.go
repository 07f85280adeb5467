package sqlitestore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
)

// writerConnsFile names the database file whose writer connections are counted.
const writerConnsFile = "count-writer-conns.db"

var writerConns atomic.Int64

func init() {
	// Registered before any test opens a connection (the driver reads its hooks unlocked).
	sqlite.RegisterConnectionHook(func(_ sqlite.ExecQuerierContext, dsn string) error {
		if strings.Contains(dsn, writerConnsFile) && !strings.Contains(dsn, "query_only") {
			writerConns.Add(1)
		}
		return nil
	})
}

// TestTxRunnerKeepsTheWriterConnection: a TxRunner whose wait for the write lock is shorter
// than the busy timeout sets the connection's busy timeout for the transaction and restores it
// after, so the writer connection goes back to the store and is used again: no transaction
// opens a new one.
func TestTxRunnerKeepsTheWriterConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), writerConnsFile), sqlitestore.Options{BusyTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	r := sqlitestore.NewTxRunner(st, sqlitestore.TxOptions{Wait: time.Second})
	before := writerConns.Load()
	for i := range 5 {
		res, err := r.Do(ctx, fmt.Sprintf("conn-%d", i), idem.Fingerprint([]byte("x")), func(context.Context) (idem.Response, error) {
			return idem.Response{Status: 200}, nil
		})
		if err != nil || !res.Executed {
			t.Fatalf("Do %d: %+v, %v", i, res, err)
		}
	}
	if n := writerConns.Load() - before; n != 0 {
		t.Fatalf("%d new writer connections for 5 transactions, want 0 (the writer connection reused)", n)
	}
}
