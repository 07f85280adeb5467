package mysqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, mysqlstore.Options{}) })
}

func TestOptionsErrors(t *testing.T) {
	t.Parallel()
	d := db(t)
	cases := []struct {
		opt   mysqlstore.Options
		field string
	}{
		{mysqlstore.Options{Table: "x`; DROP TABLE y"}, "Options.Table"},
		{mysqlstore.Options{Table: "1t"}, "Options.Table"},
		{mysqlstore.Options{Table: strings.Repeat("t", 49)}, "Options.Table"},
		{mysqlstore.Options{Database: "a.b"}, "Options.Database"},
	}
	for _, tc := range cases {
		_, err := mysqlstore.New(d, tc.opt)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want ErrInvalidInput naming %s", tc.opt, err, tc.field)
		}
	}
	if _, err := mysqlstore.New(nil, mysqlstore.Options{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("New(nil) = %v", err)
	}
	if _, err := mysqlstore.Open(context.Background(), "root:secret@tcp(127.0.0.1:3306", mysqlstore.Options{}); !errors.Is(err, idem.ErrInvalidInput) || strings.Contains(err.Error(), "secret") {
		t.Errorf("Open(bad DSN) = %v", err)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	st := newStore(t, mysqlstore.Options{})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	now := time.Now()
	for _, tc := range []struct {
		key, fp      string
		lease, windw time.Duration
	}{
		{"", fp, time.Second, time.Hour},
		{strings.Repeat("k", idem.MaxStorageKeyLen+1), fp, time.Second, time.Hour},
		{"bad\xffutf8", fp, time.Second, time.Hour},
		{"nul\x00", fp, time.Second, time.Hour},
		{"k", "not-a-fingerprint", time.Second, time.Hour},
		{"k", fp, 0, time.Hour},
		{"k", fp, time.Second, -time.Hour},
	} {
		if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: tc.key, Fingerprint: tc.fp, Now: now, Lease: tc.lease, TTL: tc.windw}); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("Reserve(%.20q, %.10q, %s, %s) = %v, want ErrInvalidInput", tc.key, tc.fp, tc.lease, tc.windw, err)
		}
	}
	// The longest key fits, and keys are case-sensitive (VARBINARY, whatever the collation).
	long := strings.Repeat("é", idem.MaxStorageKeyLen/2)
	for _, k := range []string{long, strings.ToUpper(long), "Key", "key", "KEY"} {
		if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour}); err != nil || !res.Claimed {
			t.Errorf("Reserve of %.20q (%d bytes): %v claimed=%v", k, len(k), err, res.Claimed)
		}
	}
	if _, err := st.Sweep(ctx, now, -1); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("Sweep(-1) = %v", err)
	}
	// A corrupt stored response is an error, not a panic or a wrong replay.
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "corrupt", Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, "UPDATE "+st.Table()+" SET state = 2, response = x'09' WHERE `key` = 'corrupt'"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "corrupt"); !errors.Is(err, idem.ErrCorruptRecord) {
		t.Errorf("Get of a corrupt record = %v, want ErrCorruptRecord", err)
	}
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "corrupt", Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour}); !errors.Is(err, idem.ErrCorruptRecord) {
		t.Errorf("Reserve of a corrupt record = %v, want ErrCorruptRecord", err)
	}
}

// The default database: the DSN's.
func TestDefaultDatabase(t *testing.T) {
	t.Parallel()
	d := db(t)
	table := randomName("d_")
	st, err := mysqlstore.New(d, mysqlstore.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		_ = st.Close()
		_, _ = d.ExecContext(ctx, "DROP TABLE IF EXISTS `"+table+"`")
		_, _ = d.ExecContext(ctx, "DELETE FROM "+mysqlstore.MigrationsTable+" WHERE tbl = ?", table)
	})
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: idem.Fingerprint(nil), Now: time.Now(), Lease: time.Second, TTL: time.Hour}); err != nil || !res.Claimed {
		t.Fatalf("Reserve: %v %+v", err, res)
	}
}

func TestSweepBatches(t *testing.T) {
	t.Parallel()
	st := newStore(t, mysqlstore.Options{})
	ctx := context.Background()
	now := time.Now()
	fp := idem.Fingerprint(nil)
	const n = 250
	for i := range n {
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprintf("k%d", i), Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Minute})
		if err != nil || !res.Claimed {
			t.Fatal(err)
		}
	}
	// The sweep walks the expires_at index. (EXPLAIN's columns differ between MySQL and
	// MariaDB: find "key" by name.)
	rows, err := st.DB().QueryContext(ctx, "EXPLAIN DELETE FROM "+st.Table()+" WHERE expires_at <= ? ORDER BY expires_at LIMIT 100", now.UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	names, _ := rows.Columns()
	vals := make([]any, len(names))
	ptrs := make([]any, len(names))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var used string
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for i, n := range names {
			if n == "key" {
				if b, ok := vals[i].([]byte); ok {
					used = string(b)
				}
			}
		}
	}
	rows.Close()
	if !strings.HasSuffix(used, "_expires_at") {
		t.Errorf("sweep does not use the expires_at index (EXPLAIN key %q)", used)
	}
	sw, err := mysqlstore.StartSweeper(st, mysqlstore.SweeperOptions{Interval: 5 * time.Millisecond, Batch: 40, Now: func() time.Time { return now.Add(2 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left int
		if err := st.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+st.Table()).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records left after 10s of sweeping", left)
		}
		time.Sleep(5 * time.Millisecond)
	}
	sw.Stop()
}
