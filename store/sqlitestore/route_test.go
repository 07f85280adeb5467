package sqlitestore_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/storekit"
)

// TestMigrateAddsRoute: a file of the schema before routes (version 1, made by its own
// migration file, with rows written as that release wrote them) opens, migrates and keeps its
// records, which read back without a route; claims then store routes, and a takeover of an
// old record gives it one.
func TestMigrateAddsRoute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	raw, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	v1, err := os.ReadFile("migrations/0001_records.sql")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	n := now.UnixMicro()
	for _, stmt := range []string{
		strings.ReplaceAll(string(v1), "{{table}}", sqlitestore.DefaultTable),
		`CREATE TABLE idem_migrations (tbl TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,
			applied_at INTEGER NOT NULL, PRIMARY KEY (tbl, version))`,
		`INSERT INTO idem_migrations VALUES ('` + sqlitestore.DefaultTable + `', 1, '0001_records', 0)`,
	} {
		if _, err := raw.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	resp := storekit.EncodeResponse(idem.Response{Status: 201, Body: []byte("kept")})
	if _, err := raw.ExecContext(ctx, `INSERT INTO `+sqlitestore.DefaultTable+` VALUES
		('done', ?1, 2, ?2, ?2, 1, ?3, ?2, ?2, ?4),
		('stale', ?1, 1, ?2, ?2, 1, NULL, ?2, NULL, ?4)`, fp, n, resp, n+time.Hour.Microseconds()); err != nil {
		t.Fatal(err)
	}

	st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		t.Fatalf("Open of a file before routes: %v", err)
	}
	defer st.Close()
	wantVersions(t, versions(t, st, sqlitestore.DefaultTable))
	rec, err := st.Get(ctx, "done")
	if err != nil || rec.Route != "" || rec.Response == nil || string(rec.Response.Body) != "kept" {
		t.Fatalf("Get of a record from before = %+v, %v", rec, err)
	}
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "stale", Fingerprint: fp, Route: "POST /takeover", Now: now.Add(time.Second), Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Takeover || res.Record.Route != "POST /takeover" {
		t.Fatalf("takeover of a record from before = %+v, %v", res, err)
	}
	page, err := st.List(ctx, idem.ListQuery{})
	if err != nil || len(page.Records) != 2 || page.Records[0].Route != "" || page.Records[1].Route != "POST /takeover" {
		t.Fatalf("List = %+v, %v", page, err)
	}
}

// TestTxRunnerRoute: a TxRunner's claim stores the route its Call names; Do, the short form,
// stores none.
func TestTxRunnerRoute(t *testing.T) {
	t.Parallel()
	st := open(t, sqlitestore.Options{})
	r := sqlitestore.NewTxRunner(st, sqlitestore.TxOptions{})
	_, err := r.Run(context.Background(), idem.Call{Key: "k", Fingerprint: fp, Route: "POST /tx"}, func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 200}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(context.Background(), "k"); err != nil || rec.Route != "POST /tx" {
		t.Fatalf("Get = %+v, %v; want the route POST /tx", rec, err)
	}
	if _, err := r.Do(context.Background(), "short", fp, func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 200}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(context.Background(), "short"); err != nil || rec.Route != "" {
		t.Fatalf("Get = %+v, %v; want no route", rec, err)
	}
}

// TestEngineCall: an engine on the store claims with the route and the request its Call
// carries, the route cleaned; Do, the short form, keeps neither.
func TestEngineCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := open(t, sqlitestore.Options{})
	eng, err := idem.New(st, idem.Options{Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context) (idem.Response, error) { return idem.Response{Status: 200}, nil }
	sent := &idem.Request{Method: "POST", Target: "/v1/orders", Header: map[string][]string{"Content-Type": {"application/json"}},
		Body: []byte(`{"n":1}`), BodySize: 7}
	dirty := "POST /a\x00b\xff" + strings.Repeat("\u00e9", idem.MaxRouteLen)
	if _, err := eng.Run(ctx, idem.Call{Key: "call", Fingerprint: fp, Route: dirty, Request: sent}, ok); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Do(ctx, "short", fp, ok); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(ctx, "call"); err != nil || rec.Route != storekit.CleanRoute(dirty) || !rec.Request.Equal(sent) {
		t.Fatalf("Get = %+v, %v; want the route cleaned to %.40q and the request", rec, err, storekit.CleanRoute(dirty))
	}
	if rec, err := st.Get(ctx, "short"); err != nil || rec.Route != "" || rec.Request != nil {
		t.Fatalf("Get = %+v, %v; want no route and no request", rec, err)
	}
}
