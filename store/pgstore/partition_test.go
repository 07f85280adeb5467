package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/sqlmigrate"
	"github.com/idemkit/idem/store/storetest"
)

// partitioned wraps a store of the partitioned layout for the conformance suite, whose Sweep
// test expects rows deleted in bounded batches: its Sweep is SweepRows. Dropping whole
// partitions (the layout's Sweep) has tests of its own below.
type partitioned struct{ *pgstore.Store }

func (p partitioned) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	return p.SweepRows(ctx, now, batch)
}

// newPartitioned returns a migrated store of the partitioned layout on its own table.
func newPartitioned(t testing.TB, opt pgstore.Options) *pgstore.Store {
	t.Helper()
	if opt.PartitionWidth == 0 {
		opt.PartitionWidth = time.Hour
	}
	return newStore(t, opt)
}

func TestPartitionedConformance(t *testing.T) {
	t.Parallel()
	forGroupCommit(t, func(t *testing.T, groupCommit int) {
		// 10-minute partitions: the suite's times (now, now + lease, now + 1h) cross boundaries.
		storetest.RunWithOptions(t, func(t *testing.T) idem.Store {
			return partitioned{newPartitioned(t, pgstore.Options{PartitionWidth: 10 * time.Minute, GroupCommit: groupCommit})}
		}, storetest.Options{Rounds: 20})
	})
}

func TestPartitionedOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opt   pgstore.Options
		field string
	}{
		{pgstore.Options{PartitionWidth: time.Millisecond}, "PartitionWidth"},
		{pgstore.Options{PartitionWidth: -time.Hour}, "PartitionWidth"},
		{pgstore.Options{PartitionWidth: time.Hour, PartitionMargin: -time.Second}, "PartitionMargin"},
		{pgstore.Options{PartitionMargin: time.Second}, "PartitionMargin"},
	} {
		_, err := pgstore.New(pool(t), tc.opt)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want ErrInvalidInput naming %s", tc.opt, err, tc.field)
		}
	}
	// A table made with one width refuses another.
	st := newPartitioned(t, pgstore.Options{})
	other, err := pgstore.New(pool(t), pgstore.Options{Schema: testSchema, Table: partTable(st), PartitionWidth: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Migrate(context.Background()); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("Migrate with another width = %v, want ErrInvalidInput", err)
	}
	// The plain layout refuses a partitioned table instead of writing to it.
	plain, err := pgstore.New(pool(t), pgstore.Options{Schema: testSchema, Table: partTable(st)})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Migrate(context.Background()); !errors.Is(err, sqlmigrate.ErrNewerSchema) {
		t.Fatalf("plain Migrate of a partitioned table = %v, want ErrNewerSchema", err)
	}
	if v, err := st.Version(context.Background()); err != nil || v != pgstore.PartitionedSchemaVersion {
		t.Fatalf("Version = %d, %v; want %d", v, err, pgstore.PartitionedSchemaVersion)
	}
	if _, err := plain.Partitions(context.Background()); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("Partitions of the plain layout = %v, want ErrInvalidInput", err)
	}
}

// partTable returns the unquoted table name of st (Options.Table).
func partTable(st *pgstore.Store) string {
	q := st.Table() // "schema"."table"
	i := strings.Index(q, `"."`)
	return q[i+3 : len(q)-1]
}

// rowsPerKey fails t if any key of st has more than one row across the partitions.
func rowsPerKey(t *testing.T, st *pgstore.Store) {
	t.Helper()
	var dup int
	err := st.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM (SELECT key FROM `+st.Table()+` GROUP BY key HAVING count(*) > 1) d`).Scan(&dup)
	if err != nil {
		t.Fatal(err)
	}
	if dup != 0 {
		t.Fatalf("%d keys have more than one row across the partitions", dup)
	}
}

// TestPartitionBoundaryRace races claims of the same keys from goroutines whose clocks sit on
// both sides of a partition boundary (1ms before and after it), in three cases: keys never
// seen, keys whose completed record expired in an older partition (a reclaim moves the row),
// and keys whose claim in the previous partition was abandoned (a takeover moves it). Each key
// must be claimed exactly once per round, and keep exactly one row.
func TestPartitionBoundaryRace(t *testing.T) {
	t.Parallel()
	forGroupCommit(t, testPartitionBoundaryRace)
}

// forGroupCommit runs test as parallel subtests, its claims each their own transaction and
// grouped (Options.GroupCommit 2).
func forGroupCommit(t *testing.T, test func(t *testing.T, groupCommit int)) {
	for _, gc := range []int{0, 2} {
		t.Run(fmt.Sprintf("GroupCommit=%d", gc), func(t *testing.T) {
			t.Parallel()
			test(t, gc)
		})
	}
}

func testPartitionBoundaryRace(t *testing.T, groupCommit int) {
	const width = time.Hour
	st := newPartitioned(t, pgstore.Options{PartitionWidth: width, GroupCommit: groupCommit})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("boundary"))
	boundary := time.Now().Truncate(width).Add(width) // the start of the next period
	before, after := boundary.Add(-time.Millisecond), boundary.Add(time.Millisecond)
	const keys, goroutines, rounds = 8, 16, 6
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, key string) // the key's history before the race
	}{
		{"new", func(*testing.T, string) {}},
		{"expired-in-older-partition", func(t *testing.T, key string) {
			old := boundary.Add(-2 * width)
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: old, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !res.Claimed {
				t.Fatalf("Reserve: %+v %v", res, err)
			}
			if err := st.Complete(ctx, key, res.Record.Token, idem.Response{Status: 200}, old, boundary.Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		}},
		{"abandoned-in-previous-partition", func(t *testing.T, key string) {
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: boundary.Add(-time.Minute), Lease: 30 * time.Second, TTL: 2 * time.Hour})
			if err != nil || !res.Claimed {
				t.Fatalf("Reserve: %+v %v", res, err)
			}
		}},
	} {
		for round := range rounds {
			prefix := fmt.Sprintf("%s-%d-", tc.name, round)
			for k := range keys {
				tc.prepare(t, prefix+fmt.Sprint(k))
			}
			var wins [keys]atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			errs := make(chan error, goroutines*keys)
			for g := range goroutines {
				now := before
				if g%2 == 1 {
					now = after
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := range keys {
						k := (i + g) % keys // goroutines start on different keys
						res, err := st.Reserve(ctx, idem.ReserveRequest{Key: prefix + fmt.Sprint(k), Fingerprint: fp, Now: now, Lease: 10 * time.Second, TTL: time.Hour})
						if err != nil {
							errs <- err
							continue
						}
						if res.Claimed {
							wins[k].Add(1)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("%s round %d: Reserve: %v", tc.name, round, err)
			}
			for k := range keys {
				if n := wins[k].Load(); n != 1 {
					t.Fatalf("%s round %d: key %d claimed %d times across the boundary, want exactly once", tc.name, round, k, n)
				}
			}
		}
	}
	rowsPerKey(t, st)
	// The boundary was crossed: both sides' partitions hold rows.
	ps, err := st.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var withRows int
	for _, p := range ps {
		var n int
		if err := st.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %q.%q`, testSchema, p.Name)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			withRows++
		}
	}
	if withRows < 2 {
		t.Fatalf("rows in %d partitions of %d, want both sides of the boundary", withRows, len(ps))
	}
}

// TestPartitionClaimFindsPreviousPartition: a key claimed (or completed) just before a
// boundary is found by a claim just after it, whichever side each process's clock is on; and
// the fenced calls of the first holder still reach its row.
func TestPartitionClaimFindsPreviousPartition(t *testing.T) {
	t.Parallel()
	const width = time.Hour
	st := newPartitioned(t, pgstore.Options{PartitionWidth: width})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("prev"))
	boundary := time.Now().Truncate(width).Add(width)
	first, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: boundary.Add(-time.Second), Lease: time.Minute, TTL: time.Hour})
	if err != nil || !first.Claimed {
		t.Fatalf("first Reserve: %+v %v", first, err)
	}
	again, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: boundary.Add(time.Second), Lease: time.Minute, TTL: time.Hour})
	if err != nil || again.Claimed || again.Record.State != idem.StateInProgress {
		t.Fatalf("Reserve after the boundary = %+v, %v; want the claim in progress", again, err)
	}
	if err := st.Complete(ctx, "k", first.Record.Token, idem.Response{Status: 201, Body: []byte("done")}, boundary.Add(2*time.Second), boundary.Add(time.Hour)); err != nil {
		t.Fatalf("Complete by the first holder after the boundary: %v", err)
	}
	replay, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: boundary.Add(3 * time.Second), Lease: time.Minute, TTL: time.Hour})
	if err != nil || replay.Claimed || replay.Record.Response == nil || string(replay.Record.Response.Body) != "done" {
		t.Fatalf("replay after the boundary = %+v, %v", replay, err)
	}
	// Past its lease, a takeover after the boundary moves the row; the old holder is fenced.
	held, err := st.Reserve(ctx, idem.ReserveRequest{Key: "t", Fingerprint: fp, Now: boundary.Add(-time.Second), Lease: time.Second, TTL: time.Hour})
	if err != nil || !held.Claimed {
		t.Fatal(held, err)
	}
	took, err := st.Reserve(ctx, idem.ReserveRequest{Key: "t", Fingerprint: fp, Now: boundary.Add(time.Minute), Lease: time.Minute, TTL: time.Hour})
	if err != nil || !took.Claimed || !took.Takeover || took.Record.Token <= held.Record.Token || took.Record.Attempts != 2 {
		t.Fatalf("takeover after the boundary = %+v, %v", took, err)
	}
	if err := st.Complete(ctx, "t", held.Record.Token, idem.Response{Status: 200}, boundary.Add(time.Minute), boundary.Add(time.Hour)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Complete by the old holder = %v, want ErrLeaseLost", err)
	}
	if err := st.Complete(ctx, "t", took.Record.Token, idem.Response{Status: 200}, boundary.Add(time.Minute), boundary.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	rowsPerKey(t, st)
	// Listing and Get see one record per key.
	page, err := st.List(ctx, idem.ListQuery{Limit: 10})
	if err != nil || len(page.Records) != 2 || page.Records[0].Key != "k" || page.Records[1].Key != "t" {
		t.Fatalf("List = %+v, %v", page, err)
	}
	if rec, err := st.Get(ctx, "t"); err != nil || rec.State != idem.StateCompleted || rec.Token != took.Record.Token {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
}

// TestDropExpiredPartitions: a partition is dropped only when every record in it expired at
// least the margin ago, for every reason a record stays live past its period: a long window,
// an expiry inside the margin, a lease extended by a running effect. The current and the next
// period's partitions are never dropped, and the records of the partitions kept still work.
func TestDropExpiredPartitions(t *testing.T) {
	t.Parallel()
	const width, margin = time.Hour, 10 * time.Minute
	st := newPartitioned(t, pgstore.Options{PartitionWidth: width, PartitionMargin: margin})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("drop"))
	now := time.Now().Truncate(width).Add(width / 2) // mid-period
	period := func(back int) time.Time { return now.Truncate(width).Add(-time.Duration(back) * width) }
	complete := func(key string, at time.Time, expires time.Time) int64 {
		t.Helper()
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: at, Lease: time.Minute, TTL: 48 * time.Hour})
		if err != nil || !res.Claimed {
			t.Fatalf("Reserve(%s): %+v %v", key, res, err)
		}
		if err := st.Complete(ctx, key, res.Record.Token, idem.Response{Status: 200, Body: []byte(key)}, at, expires); err != nil {
			t.Fatal(err)
		}
		return res.Record.Token
	}
	// Period -5: all expired long ago → dropped.
	complete("gone-1", period(5), period(4))
	complete("gone-2", period(5).Add(time.Minute), period(4))
	// Period -4: one record still live (a long window) → kept.
	complete("dead-4", period(4), period(3))
	complete("live-window", period(4).Add(time.Minute), now.Add(time.Hour))
	// Period -3: its last record expired inside the margin → kept (a clock behind sees it).
	complete("in-margin", period(3), now.Add(-margin/2))
	// Period -2: an effect still running, its lease extended past its window → kept.
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "extended", Fingerprint: fp, Now: period(2), Lease: time.Minute, TTL: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatal(res, err)
	}
	if err := st.Extend(ctx, "extended", res.Record.Token, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	before, err := st.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dropped, records, err := st.DropExpiredPartitions(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if dropped != 1 || records != 2 {
		t.Fatalf("DropExpiredPartitions = %d partitions, %d records; want 1, 2", dropped, records)
	}
	after, err := st.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before)-1 {
		t.Fatalf("partitions %d → %d", len(before), len(after))
	}
	for _, p := range after {
		if p.From.Equal(period(5)) {
			t.Fatalf("partition %s of the expired period is still there", p.Name)
		}
	}
	for _, k := range []string{"gone-1", "gone-2"} {
		if _, err := st.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("Get(%s) after the drop = %v, want ErrNotFound", k, err)
		}
	}
	// The kept records work: a replay, an in-progress claim and its fenced completion.
	rep, err := st.Reserve(ctx, idem.ReserveRequest{Key: "live-window", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || rep.Claimed || rep.Record.Response == nil || string(rep.Record.Response.Body) != "live-window" {
		t.Fatalf("replay of a kept record = %+v, %v", rep, err)
	}
	if err := st.Complete(ctx, "extended", res.Record.Token, idem.Response{Status: 200}, now, now.Add(time.Hour)); err != nil {
		t.Fatalf("Complete of the extended claim: %v", err)
	}
	// Past the margin of every record, everything before the current period goes; the
	// current and next periods' partitions stay, even empty.
	later := now.Add(3 * time.Hour)
	if _, _, err := st.DropExpiredPartitions(ctx, later); err != nil {
		t.Fatal(err)
	}
	rest, err := st.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rest {
		if p.To.After(later.Truncate(width)) {
			continue
		}
		var newest *int64
		if err := st.Pool().QueryRow(ctx, fmt.Sprintf(`SELECT max(expires_at) FROM %q.%q`, testSchema, p.Name)).Scan(&newest); err != nil {
			t.Fatal(err)
		}
		if newest == nil || time.UnixMicro(*newest).Before(later.Add(-margin)) {
			t.Fatalf("partition %s (%v–%v) kept with nothing live in it (newest expiry %v)", p.Name, p.From, p.To, newest)
		}
	}
	// Sweep does the same, and creates the partitions of the current and next period.
	n, err := st.Sweep(ctx, later.Add(2*time.Hour), 1000)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Sweep dropped partitions holding %d records", n)
	final, err := st.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur := later.Add(2 * time.Hour).Truncate(width)
	var haveCur, haveNext bool
	for _, p := range final {
		haveCur = haveCur || p.From.Equal(cur)
		haveNext = haveNext || p.From.Equal(cur.Add(width))
	}
	if !haveCur || !haveNext {
		t.Fatalf("after Sweep, partitions %+v lack the current or the next period", final)
	}
}

// TestDropRacesClaims drops partitions while claims of keys living in them run: no claim
// fails, none is doubled, and a live record is never dropped from under a reader.
func TestDropRacesClaims(t *testing.T) {
	t.Parallel()
	forGroupCommit(t, testDropRacesClaims)
}

func testDropRacesClaims(t *testing.T, groupCommit int) {
	const width = time.Hour
	st := newPartitioned(t, pgstore.Options{PartitionWidth: width, PartitionMargin: time.Minute, GroupCommit: groupCommit})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("droprace"))
	now := time.Now().Truncate(width).Add(width / 2)
	old := now.Add(-3 * width)
	const keys = 40
	// Half the keys expired in an old partition, half completed there and still live.
	for i := range keys {
		expires := old.Add(time.Hour)
		if i%2 == 1 {
			expires = now.Add(7 * time.Hour)
		}
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprint("k", i), Fingerprint: fp, Now: old, Lease: time.Minute, TTL: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatal(res, err)
		}
		if err := st.Complete(ctx, fmt.Sprint("k", i), res.Record.Token, idem.Response{Status: 200}, old, expires); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var wins [keys]atomic.Int32
	errs := make(chan error, 8*keys+8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				k := (i + g*5) % keys
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprint("k", k), Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
				if err != nil {
					errs <- err
					continue
				}
				if res.Claimed {
					wins[k].Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 5 {
			if _, _, err := st.DropExpiredPartitions(ctx, now); err != nil {
				errs <- err
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range keys {
		want := int32(1 - i%2) // expired keys are claimed once; live ones never
		if n := wins[i].Load(); n != want {
			t.Fatalf("key %d claimed %d times, want %d", i, n, want)
		}
		if i%2 == 1 {
			rec, err := st.Get(ctx, fmt.Sprint("k", i))
			if err != nil || rec.State != idem.StateCompleted {
				t.Fatalf("live key %d after the drops: %+v, %v", i, rec, err)
			}
		}
	}
	rowsPerKey(t, st)
}

// TestConvertFromPlain converts a table of the plain layout holding records in every state,
// and checks that each keeps working in the partitioned layout, that the plain layout then
// refuses the table, and that the converted rows' partition is dropped once they expired.
func TestConvertFromPlain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	table := randomName("c_")
	plain := newStore(t, pgstore.Options{Table: table})
	fp := idem.Fingerprint([]byte("convert"))
	now := time.Now()
	claim := func(key string, lease, window time.Duration) int64 {
		t.Helper()
		res, err := plain.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: lease, TTL: window})
		if err != nil || !res.Claimed {
			t.Fatal(res, err)
		}
		return res.Record.Token
	}
	tok := claim("completed", time.Minute, time.Hour)
	if err := plain.Complete(ctx, "completed", tok, idem.Response{Status: 201, Body: []byte("kept")}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	inflight := claim("in-flight", time.Hour, 2*time.Hour)
	claim("expired", time.Second, time.Minute)
	rel := claim("released", time.Minute, time.Hour)
	if err := plain.Release(ctx, "released", rel); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		claim(fmt.Sprint("bulk-", i), time.Minute, time.Hour)
	}

	part, err := pgstore.New(pool(t), pgstore.Options{Schema: testSchema, Table: table, PartitionWidth: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := part.Migrate(ctx); err != nil {
		t.Fatalf("Migrate converting the plain table: %v", err)
	}
	if err := part.Migrate(ctx); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if v, err := part.Version(ctx); err != nil || v != pgstore.PartitionedSchemaVersion {
		t.Fatalf("Version after conversion = %d, %v", v, err)
	}
	ps, err := part.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var legacy bool
	for _, p := range ps {
		legacy = legacy || (p.Name == pgstore.LegacyPartition(table) && p.From.IsZero())
	}
	if len(ps) < 2 || !legacy {
		t.Fatalf("partitions after conversion: %+v", ps)
	}
	later := now.Add(2 * time.Minute)
	// Completed: replayed. In flight: still held, completed by its holder's token.
	if res, err := part.Reserve(ctx, idem.ReserveRequest{Key: "completed", Fingerprint: fp, Now: later, Lease: time.Minute, TTL: time.Hour}); err != nil || res.Claimed || string(res.Record.Response.Body) != "kept" {
		t.Fatalf("replay of a converted record = %+v, %v", res, err)
	}
	if res, err := part.Reserve(ctx, idem.ReserveRequest{Key: "in-flight", Fingerprint: fp, Now: later, Lease: time.Minute, TTL: time.Hour}); err != nil || res.Claimed || res.Record.State != idem.StateInProgress {
		t.Fatalf("claim of a converted in-flight key = %+v, %v", res, err)
	}
	if err := part.Complete(ctx, "in-flight", inflight, idem.Response{Status: 200}, later, later.Add(time.Hour)); err != nil {
		t.Fatalf("Complete of a converted claim: %v", err)
	}
	// Expired and released: claimed again, with a larger token, the row moving.
	for _, k := range []string{"expired", "released"} {
		old, err := part.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		res, err := part.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: later, Lease: time.Minute, TTL: 10 * time.Hour})
		if err != nil || !res.Claimed || res.Record.Token <= old.Token {
			t.Fatalf("reclaim of converted %s = %+v, %v (old token %d)", k, res, err, old.Token)
		}
	}
	rowsPerKey(t, part)
	page, err := part.List(ctx, idem.ListQuery{Limit: 1000})
	if err != nil || len(page.Records) != 104 {
		t.Fatalf("List after conversion: %d records, %v; want 104", len(page.Records), err)
	}
	// The plain layout refuses the converted table, and cannot claim in it.
	if err := plain.Migrate(ctx); !errors.Is(err, sqlmigrate.ErrNewerSchema) {
		t.Fatalf("plain Migrate after conversion = %v, want ErrNewerSchema", err)
	}
	if res, err := plain.Reserve(ctx, idem.ReserveRequest{Key: "new-by-plain", Fingerprint: fp, Now: later, Lease: time.Minute, TTL: time.Hour}); err == nil {
		t.Fatalf("plain Reserve on the converted table = %+v, want an error", res)
	}
	// Two hours on, the converted rows all expired: their partition goes whole.
	dropped, records, err := part.DropExpiredPartitions(ctx, now.Add(3*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if dropped < 1 || records < 100 {
		t.Fatalf("DropExpiredPartitions after the window = %d, %d", dropped, records)
	}
	for _, p := range mustPartitions(t, part) {
		if p.Name == pgstore.LegacyPartition(table) {
			t.Fatalf("the converted partition is still there")
		}
	}
	if _, err := part.Get(ctx, "expired"); err != nil {
		t.Fatalf("a record claimed after the conversion went with the converted partition: %v", err)
	}
}

func mustPartitions(t *testing.T, st *pgstore.Store) []pgstore.Partition {
	t.Helper()
	ps, err := st.Partitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestPartitionedDoTx: the same-transaction mode works in the partitioned layout: the claim
// lock is held until the caller's transaction commits, so a duplicate replays.
func TestPartitionedDoTx(t *testing.T) {
	t.Parallel()
	st := newPartitioned(t, pgstore.Options{})
	ctx := context.Background()
	var runs atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.DoTx(ctx, "tx-key", idem.Fingerprint([]byte("tx")), func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
				runs.Add(1)
				time.Sleep(10 * time.Millisecond)
				return idem.Response{Status: 201}, nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("DoTx ran %d times, want 1", n)
	}
}

// TestPartitionedGroupCompleteThenClaim: a group transaction that completes a key and claims
// it again (a duplicate that arrived meanwhile) must take the key's claim lock before its row,
// as every claim does. Another transaction holds the claim lock and then wants the row: if the
// group locked the row first and then waited for the claim lock, the two would deadlock and
// PostgreSQL would abort one.
func TestPartitionedGroupCompleteThenClaim(t *testing.T) {
	t.Parallel()
	st := newPartitioned(t, pgstore.Options{GroupCommit: 1})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("order"))
	now := time.Now()
	first, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !first.Claimed {
		t.Fatal(first, err)
	}
	other, err := st.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Rollback(ctx) }() // after the commit below: nothing to undo
	if _, err := other.Exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, pgstore.ClaimLockSQL(st), "k"); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res  idem.Reservation
		errs []error
	}
	done := make(chan outcome, 1)
	go func() {
		res, errs := pgstore.CompleteThenReserveTogether(ctx, st, "k", first.Record.Token, fp, now.Add(time.Second))
		done <- outcome{res, errs}
	}()
	time.Sleep(300 * time.Millisecond) // the group's transaction reaches the claim lock
	if _, err := other.Exec(ctx, `SELECT 1 FROM `+st.Table()+` WHERE key = 'k' FOR UPDATE`); err != nil {
		t.Fatalf("the claim lock's holder could not lock the row: %v", err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-done
	for _, err := range got.errs {
		if err != nil {
			t.Fatalf("group transaction: %v", err)
		}
	}
	// The claim ran first: it found the claim in progress; then the completion landed.
	if got.res.Claimed || got.res.Record.State != idem.StateInProgress {
		t.Fatalf("second claim = %+v, want the first claim in progress", got.res)
	}
	if rec, err := st.Get(ctx, "k"); err != nil || rec.State != idem.StateCompleted {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
}

// TestPartitionedGroupPartitionDropped: a process whose clock is far behind claims into a
// partition that another process dropped since the first one created it. Its group
// transaction fails on the missing table, rolls back, and runs again once the partition is
// created anew: every call of it succeeds.
func TestPartitionedGroupPartitionDropped(t *testing.T) {
	t.Parallel()
	const width = time.Hour
	behind := newPartitioned(t, pgstore.Options{PartitionWidth: width, PartitionMargin: time.Minute, GroupCommit: 2})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("dropped"))
	then := time.Now().Add(-5 * width)
	res, err := behind.Reserve(ctx, idem.ReserveRequest{Key: "a", Fingerprint: fp, Now: then, Lease: time.Minute, TTL: time.Minute})
	if err != nil || !res.Claimed {
		t.Fatal(res, err)
	}
	if err := behind.Complete(ctx, "a", res.Record.Token, idem.Response{Status: 200}, then, then.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	dropper, err := pgstore.New(behind.Pool(), pgstore.Options{Schema: testSchema, Table: partTable(behind), PartitionWidth: width, PartitionMargin: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if n, _, err := dropper.DropExpiredPartitions(ctx, time.Now()); err != nil || n != 1 {
		t.Fatalf("DropExpiredPartitions = %d, %v; want 1 partition", n, err)
	}
	// Two claims in one group transaction, into the dropped partition.
	results, errs := pgstore.ReserveTogether(ctx, behind, []string{"b", "c"}, fp, then.Add(time.Second))
	for i, err := range errs {
		if err != nil || !results[i].Claimed {
			t.Fatalf("claim %d into the dropped partition = %+v, %v; want a claim", i, results[i], err)
		}
	}
	var recreated bool
	for _, p := range mustPartitions(t, behind) {
		recreated = recreated || p.From.Equal(then.Truncate(width))
	}
	if !recreated {
		t.Fatalf("partitions = %+v, want the one of %s recreated", mustPartitions(t, behind), then)
	}
}
