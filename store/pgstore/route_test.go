package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
)

// toPreviousSchema puts st's table back to the schema before routes (and starts and requests):
// without the route column, and with the version that added it unrecorded.
func toPreviousSchema(t *testing.T, st *pgstore.Store, table string, version int) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Pool().Exec(ctx, `ALTER TABLE `+st.Table()+` DROP COLUMN route, DROP COLUMN starts, DROP COLUMN request`); err != nil {
		t.Fatal(err)
	}
	_, err := st.Pool().Exec(ctx, fmt.Sprintf(`DELETE FROM %q.%q WHERE tbl = $1 AND version >= $2`,
		testSchema, pgstore.MigrationsTable), table, version)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := st.Version(ctx); err != nil || v != version-1 {
		t.Fatalf("Version after going back = %d, %v; want %d", v, err, version-1)
	}
}

// TestMigrateAddsRoute: a table of the schema before routes, plain or partitioned, migrates
// and keeps its records, which read back without a route or a request; claims then store
// routes and requests, and a takeover of an old record gives it one. A plain table of that schema converts to the
// partitioned layout the same way.
func TestMigrateAddsRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		opt     pgstore.Options
		convert bool // migrate with the partitioned layout after going back
	}{
		{name: "Plain"},
		{name: "Partitioned", opt: pgstore.Options{PartitionWidth: time.Hour}},
		{name: "PlainToPartitioned", convert: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			opt := tc.opt
			opt.Table = randomName("r_")
			st := newStore(t, opt)
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
			version := pgstore.SchemaVersion
			if tc.opt.PartitionWidth > 0 {
				version = pgstore.PartitionedSchemaVersion
			}
			toPreviousSchema(t, st, opt.Table, version-3) // version 2 added routes, 3 starts, 4 the newest-first index, 5 requests

			if tc.convert {
				var err error
				st, err = pgstore.New(st.Pool(), pgstore.Options{Schema: testSchema, Table: opt.Table, PartitionWidth: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				version = pgstore.PartitionedSchemaVersion
			}
			if err := st.Migrate(ctx); err != nil {
				t.Fatalf("Migrate from the schema before routes: %v", err)
			}
			if v, err := st.Version(ctx); err != nil || v != version {
				t.Fatalf("Version = %d, %v; want %d", v, err, version)
			}
			rec, err := st.Get(ctx, "done")
			if err != nil || rec.Route != "" || rec.Request != nil || rec.Starts != 1 || rec.Response == nil || string(rec.Response.Body) != "kept" {
				t.Fatalf("Get of a record from before = %+v, %v", rec, err)
			}
			later := now.Add(2 * time.Second)
			sent := &idem.Request{Method: "POST", Target: "/takeover", Body: []byte("b"), BodySize: 1}
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "stale", Fingerprint: fp, Route: "POST /takeover", Request: sent, Now: later, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !res.Takeover || res.Record.Route != "POST /takeover" || res.Record.Starts != 2 || !res.Record.Request.Equal(sent) {
				t.Fatalf("takeover of a record from before = %+v, %v", res, err)
			}
			res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "new", Fingerprint: fp, Route: "POST /new", Now: later, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !res.Claimed || res.Record.Route != "POST /new" {
				t.Fatalf("new claim = %+v, %v", res, err)
			}
			page, err := st.List(ctx, idem.ListQuery{})
			if err != nil || len(page.Records) != 3 {
				t.Fatalf("List = %+v, %v", page, err)
			}
			for _, r := range page.Records {
				if want := map[string]string{"done": "", "new": "POST /new", "stale": "POST /takeover"}[r.Key]; r.Route != want {
					t.Errorf("List: %s has route %q, want %q", r.Key, r.Route, want)
				}
			}
		})
	}
}

// TestTxRunnerRoute: a TxRunner's claim stores the route its Call names; Do, the short form,
// stores none.
func TestTxRunnerRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  pgstore.Options
	}{{name: "Plain"}, {name: "Partitioned", opt: pgstore.Options{PartitionWidth: time.Hour}}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t, tc.opt)
			r := pgstore.NewTxRunner(st, pgstore.TxOptions{})
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
		})
	}
}
