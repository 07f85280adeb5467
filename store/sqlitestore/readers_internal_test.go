package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
)

// A reader whose connection went bad fails one lookup, then is reopened.
func TestReaderReopens(t *testing.T) {
	t.Parallel()
	st, err := Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), Options{Readers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	r := <-st.readers
	r.conn.Close() // as if the connection died under the store
	st.readers <- r
	if _, err := st.Get(ctx, "k"); !errors.Is(err, sql.ErrConnDone) {
		t.Fatalf("Get on a dead connection: %v, want sql.ErrConnDone", err)
	}
	for range 3 {
		if _, err := st.Get(ctx, "k"); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("Get after the reader was reopened: %v, want ErrNotFound", err)
		}
	}
}
