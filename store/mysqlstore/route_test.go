package mysqlstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/mysqlstore"
)

// TestMigrateAddsRoute: a table of the schema before routes migrates and keeps its records,
// which read back without a route; claims then store routes, and a takeover of an old record
// gives it one. A step that added the column but stopped before recording it runs again.
func TestMigrateAddsRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		keepColumn bool // the column stays: the step ran but was not recorded
	}{{name: "FromVersion1"}, {name: "StepNotRecorded", keepColumn: true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			table := randomName("r_")
			st := newStore(t, mysqlstore.Options{Table: table})
			fp := idem.Fingerprint([]byte("route"))
			now := time.Now()
			done, err := st.Reserve(ctx, idem.ReserveRequest{Key: "done", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Complete(ctx, "done", done.Record.Token, idem.Response{Status: 201, Body: []byte("kept")}, now, now.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "stale", Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			// Back to the schema before routes (version 2), starts (version 3) and requests (5).
			if !tc.keepColumn {
				if _, err := st.DB().ExecContext(ctx, "ALTER TABLE "+st.Table()+" DROP COLUMN route, DROP COLUMN starts, DROP COLUMN request"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := st.DB().ExecContext(ctx, fmt.Sprintf("DELETE FROM `%s`.`%s` WHERE tbl = ? AND version >= 2",
				testDatabase, mysqlstore.MigrationsTable), table); err != nil {
				t.Fatal(err)
			}
			if v, err := st.Version(ctx); err != nil || v != 1 {
				t.Fatalf("Version after going back = %d, %v", v, err)
			}
			if err := st.Migrate(ctx); err != nil {
				t.Fatalf("Migrate from the schema before routes: %v", err)
			}
			if v, err := st.Version(ctx); err != nil || v != mysqlstore.SchemaVersion {
				t.Fatalf("Version = %d, %v; want %d", v, err, mysqlstore.SchemaVersion)
			}
			rec, err := st.Get(ctx, "done")
			if err != nil || rec.Route != "" || rec.Starts != 1 || rec.Response == nil || string(rec.Response.Body) != "kept" {
				t.Fatalf("Get of a record from before = %+v, %v", rec, err)
			}
			later := now.Add(2 * time.Second)
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "stale", Fingerprint: fp, Route: "POST /takeover", Now: later, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !res.Takeover || res.Record.Route != "POST /takeover" || res.Record.Starts != 2 {
				t.Fatalf("takeover of a record from before = %+v, %v", res, err)
			}
			page, err := st.List(ctx, idem.ListQuery{})
			if err != nil || len(page.Records) != 2 || page.Records[0].Route != "" || page.Records[1].Route != "POST /takeover" {
				t.Fatalf("List = %+v, %v", page, err)
			}
		})
	}
}

// TestTxRunnerRoute: a TxRunner's claim stores the route its Call names; Do, the short form,
// stores none.
func TestTxRunnerRoute(t *testing.T) {
	t.Parallel()
	st := newStore(t, mysqlstore.Options{})
	r := mysqlstore.NewTxRunner(st, mysqlstore.TxOptions{})
	_, err := r.Run(context.Background(), idem.Call{Key: "k", Fingerprint: idem.Fingerprint([]byte("tx")), Route: "POST /tx"}, func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 200}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(context.Background(), "k"); err != nil || rec.Route != "POST /tx" {
		t.Fatalf("Get = %+v, %v; want the route POST /tx", rec, err)
	}
	if _, err := r.Do(context.Background(), "short", idem.Fingerprint([]byte("tx")), func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 200}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(context.Background(), "short"); err != nil || rec.Route != "" {
		t.Fatalf("Get = %+v, %v; want no route", rec, err)
	}
}
