package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storeurl"
)

// TestPostgresPartitionWidth: partition_width selects pgstore's partitioned layout, with
// group commit as in the plain layout, and its Sweep keeps the partitions of the current and the next period.
func TestPostgresPartitionWidth(t *testing.T) {
	u := testenv.PostgresURL(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	table := fmt.Sprintf("storeurl_part_%d", time.Now().UnixNano()%1e9)
	raw := u + sep + "table=" + table + "&partition_width=6h&partition_margin=1m"
	roundTrip(t, raw)
	st, err := storeurl.Open(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	ps := st.(*pgstore.Store)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = ps.Pool().Exec(ctx, `DROP TABLE IF EXISTS `+ps.Table())
		_, _ = ps.Pool().Exec(ctx, `DELETE FROM `+pgstore.MigrationsTable+` WHERE tbl = $1`, table)
		st.Close()
	})
	if ps.GroupCommit() != storeurl.PostgresGroupCommit {
		t.Fatalf("GroupCommit %d with partition_width, want %d", ps.GroupCommit(), storeurl.PostgresGroupCommit)
	}
	res, err := st.Reserve(context.Background(), idem.ReserveRequest{Key: "k", Fingerprint: idem.Fingerprint([]byte("k")), Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	if _, err := st.Sweep(context.Background(), time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	parts, err := ps.Partitions(context.Background())
	if err != nil || len(parts) < 2 || parts[0].To.Sub(parts[0].From) != 6*time.Hour {
		t.Fatalf("Partitions = %+v, %v", parts, err)
	}
	for _, bad := range []string{"&partition_width=soon", "&partition_width=6h&group_commit=-1"} {
		if _, err := storeurl.Open(context.Background(), u+sep+"table="+table+bad); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("Open(…%s) = %v, want ErrInvalidInput", bad, err)
		}
	}
}
