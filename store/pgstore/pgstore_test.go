package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, pgstore.Options{}) })
}

func TestOptionsErrors(t *testing.T) {
	t.Parallel()
	p := pool(t)
	cases := []struct {
		opt   pgstore.Options
		field string
	}{
		{pgstore.Options{Table: "x; DROP TABLE y"}, "Options.Table"},
		{pgstore.Options{Table: "1t"}, "Options.Table"},
		{pgstore.Options{Table: strings.Repeat("t", 49)}, "Options.Table"},
		{pgstore.Options{Schema: "a.b"}, "Options.Schema"},
		{pgstore.Options{TxTTL: -time.Second}, "Options.TxTTL"},
	}
	for _, tc := range cases {
		_, err := pgstore.New(p, tc.opt)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want ErrInvalidInput naming %s", tc.opt, err, tc.field)
		}
	}
	if _, err := pgstore.New(nil, pgstore.Options{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("New(nil) = %v", err)
	}
	if _, err := pgstore.Open(context.Background(), "postgres://%zz", pgstore.Options{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("Open(bad URL) = %v", err)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	t.Run("one statement per call", func(t *testing.T) { badInput(t, pgstore.Options{}) })
	t.Run("GroupCommit", func(t *testing.T) { badInput(t, pgstore.Options{GroupCommit: 2}) })
}

func badInput(t *testing.T, opt pgstore.Options) {
	st := newStore(t, opt)
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
	// The longest key fits.
	long := strings.Repeat("é", idem.MaxStorageKeyLen/2)
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: long, Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour}); err != nil || !res.Claimed {
		t.Errorf("Reserve of a %d-byte key: %v %+v", len(long), err, res)
	}
	// Keys are case-sensitive.
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: strings.ToUpper(long), Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour}); err != nil || !res.Claimed {
		t.Errorf("Reserve of the upper-case key: %v claimed=%v", err, res.Claimed)
	}
	if _, err := st.Sweep(ctx, now, -1); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("Sweep(-1) = %v", err)
	}
	// A corrupt stored response is an error, not a panic or a wrong replay.
	res, _ := st.Reserve(ctx, idem.ReserveRequest{Key: "corrupt", Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour})
	if _, err := st.Pool().Exec(ctx, `UPDATE `+st.Table()+` SET state = 2, response = '\x09'::bytea WHERE key = 'corrupt'`); err != nil {
		t.Fatal(err)
	}
	_ = res
	if _, err := st.Get(ctx, "corrupt"); !errors.Is(err, idem.ErrCorruptRecord) {
		t.Errorf("Get of a corrupt record = %v, want ErrCorruptRecord", err)
	}
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "corrupt", Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour}); !errors.Is(err, idem.ErrCorruptRecord) {
		t.Errorf("Reserve of a corrupt record = %v, want ErrCorruptRecord", err)
	}
}

// The default schema: unqualified names on the connection's search_path.
func TestDefaultSchema(t *testing.T) {
	t.Parallel()
	p := pool(t)
	table := randomName("d_")
	st, err := pgstore.New(p, pgstore.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		_, _ = p.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize())
		_, _ = p.Exec(ctx, `DELETE FROM `+pgstore.MigrationsTable+` WHERE tbl = $1`, table)
	})
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: idem.Fingerprint(nil), Now: time.Now(), Lease: time.Second, TTL: time.Hour}); err != nil || !res.Claimed {
		t.Fatalf("Reserve: %v %+v", err, res)
	}
}

// queryCounter counts the queries and prepares a pool sends: each query is one round trip.
type queryCounter struct{ queries, prepares atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *queryCounter) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	c.prepares.Add(1)
	return ctx
}
func (c *queryCounter) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

func TestOneRoundTrip(t *testing.T) {
	t.Parallel()
	base := newStore(t, pgstore.Options{})
	cfg := pool(t).Config()
	var counter queryCounter
	cfg.ConnConfig.Tracer = &counter
	cfg.MaxConns = 1
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	st, err := pgstore.New(p, pgstore.Options{Schema: testSchema, Table: strings.Trim(strings.TrimPrefix(base.Table(), `"`+testSchema+`".`), `"`)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	now := time.Now()
	// Warm up: the first use of each statement prepares it on the connection.
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "warm", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatal(err, res)
	}
	if err := st.Complete(ctx, "warm", res.Record.Token, idem.Response{Status: 201, Body: []byte("ok")}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"new key", func() error {
			r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "new", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err == nil && !r.Claimed {
				err = errors.New("not claimed")
			}
			return err
		}},
		{"replay", func() error {
			r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "warm", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err == nil && (r.Claimed || r.Record.Response == nil || string(r.Record.Response.Body) != "ok") {
				err = fmt.Errorf("not a replay: %+v", r)
			}
			return err
		}},
		{"in flight", func() error {
			r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "new", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err == nil && r.Claimed {
				err = errors.New("claimed twice")
			}
			return err
		}},
	}
	for _, s := range steps {
		q0, p0 := counter.queries.Load(), counter.prepares.Load()
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if q, pr := counter.queries.Load()-q0, counter.prepares.Load()-p0; q != 1 || pr != 0 {
			t.Errorf("%s: %d queries and %d prepares, want one round trip (1 query, 0 prepares)", s.name, q, pr)
		}
	}
}

func TestSweepBatches(t *testing.T) {
	t.Parallel()
	st := newStore(t, pgstore.Options{})
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
	// The sweep can use the expires_at index (on a table this small the planner would rather
	// scan, so sequential scans are discouraged for the check).
	var plan string
	tx, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN SELECT key FROM `+st.Table()+` WHERE expires_at <= $1 ORDER BY expires_at LIMIT 100`, now.UnixMicro())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		_ = rows.Scan(&line)
		plan += line + "\n"
	}
	rows.Close()
	_ = tx.Rollback(ctx)
	if !strings.Contains(plan, "_expires_at") {
		t.Errorf("sweep does not use the expires_at index:\n%s", plan)
	}
	// MaxShare 1: no pacing pauses (the sweeper's pacing has tests of its own), so a loaded
	// server slows the sweep only by its statements' own time.
	sw, err := pgstore.StartSweeper(st, pgstore.SweeperOptions{Interval: 5 * time.Millisecond, Batch: 40, MaxShare: 1,
		Now: func() time.Time { return now.Add(2 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left int
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM `+st.Table()).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records left after 30s of sweeping", left)
		}
		time.Sleep(5 * time.Millisecond)
	}
	sw.Stop()
	sw.Stop() // twice is fine
}
