// Package storetest is the conformance suite for idem.Store implementations.
//
// Every backend passes it unchanged: its test is a constructor and a call.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) idem.Store { return newIsolatedStore(t) })
//	}
//
// The constructor is called once per subtest and must return a store that shares nothing with
// the others (its own table, schema or key prefix), so subtests run in parallel. It registers
// its own cleanup with t.Cleanup.
//
// # What it checks
//
// Concurrent claims of one key (exactly one wins, repeated), takeover only after the lease ran
// out and only with the same fingerprint, fencing of Complete, Release and Extend, expired
// records counting as absent, Sweep deleting only expired records in bounded batches, exact
// round trips of empty, binary and large bodies, long and unicode keys and multi-valued headers,
// cancelled contexts, Complete racing a takeover, a closed store failing cleanly, and a
// porcupine check that concurrent histories of all operations are linearizable with respect
// to the contract (see CheckLinearizable).
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Options tune the suite for a backend.
type Options struct {
	// Goroutines is how many goroutines race for one key in the concurrency tests. Default 64.
	Goroutines int
	// Rounds is how many times each concurrency test is repeated. Default 50.
	Rounds int
	// SkipClose skips the closed-store test for a backend whose Close is shared or absent.
	// The suite logs the skip.
	SkipClose bool
}

// NewStore returns a fresh, isolated store for one subtest.
type NewStore func(t *testing.T) idem.Store

// Run runs the whole suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) { RunWithOptions(t, newStore, Options{}) }

// RunWithOptions runs the suite with opt.
func RunWithOptions(t *testing.T, newStore NewStore, opt Options) {
	if opt.Goroutines == 0 {
		opt.Goroutines = 64
	}
	if opt.Rounds == 0 {
		opt.Rounds = 50
	}
	s := suite{newStore: newStore, opt: opt}
	tests := []struct {
		name string
		fn   func(t *testing.T, b *bundle)
	}{
		{"ReserveNew", s.reserveNew},
		{"ReserveExisting", s.reserveExisting},
		{"ConcurrentReserveOneWinner", s.concurrentReserve},
		{"TakeoverAfterLease", s.takeover},
		{"NoTakeoverWithOtherFingerprint", s.noTakeoverOtherFingerprint},
		{"Fencing", s.fencing},
		{"CompleteAndReplay", s.completeAndReplay},
		{"ReleaseThenReclaim", s.releaseThenReclaim},
		{"ExtendKeepsClaim", s.extend},
		{"ExpiredIsAbsent", s.expiredIsAbsent},
		{"ExpiredInProgressIsAbsent", s.expiredInProgressIsAbsent},
		{"Sweep", s.sweep},
		{"SweepKeepsLiveClaims", s.sweepKeepsLiveClaims},
		{"RoundTrip", s.roundTrip},
		{"GetMissing", s.getMissing},
		{"CancelledContext", s.cancelledContext},
		{"CompleteRacesTakeover", s.completeRacesTakeover},
		{"ManyKeysConcurrently", s.manyKeys},
		{"LoserGetsBlockingRecord", s.loserGetsBlockingRecord},
		{"InvalidKeys", s.invalidKeys},
		{"Delete", s.delete},
		{"Linearizable", s.linearizable},
		{"Closed", s.closed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, &bundle{store: newStore(t), base: time.Now().Truncate(time.Millisecond), prefix: randomPrefix()})
		})
	}
}

type suite struct {
	newStore NewStore
	opt      Options
}

type bundle struct {
	store  idem.Store
	base   time.Time // "now" for the test, near the real clock so storage TTLs make sense
	prefix string
}

func (b *bundle) key(name string) string { return b.prefix + name }

func randomPrefix() string { return fmt.Sprintf("st%08x:", rand.Uint32()) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

const (
	lease  = 10 * time.Second
	window = time.Hour
)

var (
	fpA = idem.Fingerprint([]byte("a"))
	fpB = idem.Fingerprint([]byte("b"))
)

func mustReserve(t *testing.T, st idem.Store, key, fp string, now time.Time) idem.Reservation {
	t.Helper()
	res, err := st.Reserve(ctx(t), key, fp, now, lease, window)
	if err != nil {
		t.Fatalf("Reserve(%q): %v", key, err)
	}
	return res
}

func mustClaim(t *testing.T, st idem.Store, key, fp string, now time.Time) idem.Record {
	t.Helper()
	res := mustReserve(t, st, key, fp, now)
	if !res.Claimed {
		t.Fatalf("Reserve(%q) did not claim; existing record %+v", key, res.Record)
	}
	return res.Record
}

func mustGet(t *testing.T, st idem.Store, key string) idem.Record {
	t.Helper()
	rec, err := st.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return rec
}

func sameTime(a, b time.Time) bool {
	return a.Truncate(time.Microsecond).Equal(b.Truncate(time.Microsecond))
}

func checkTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !sameTime(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// checkSame fails unless two records are equal in every field.
func checkSame(t *testing.T, what string, got, want idem.Record) {
	t.Helper()
	if got.Key != want.Key || got.Fingerprint != want.Fingerprint || got.State != want.State ||
		got.Token != want.Token || got.Attempts != want.Attempts ||
		!sameTime(got.LeaseUntil, want.LeaseUntil) || !sameTime(got.ExpiresAt, want.ExpiresAt) ||
		!sameTime(got.CreatedAt, want.CreatedAt) || !sameTime(got.CompletedAt, want.CompletedAt) ||
		(got.Response == nil) != (want.Response == nil) ||
		(got.Response != nil && !got.Response.Equal(*want.Response)) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func (s suite) reserveNew(t *testing.T, b *bundle) {
	k := b.key("new")
	res := mustReserve(t, b.store, k, fpA, b.base)
	if !res.Claimed || res.Takeover {
		t.Fatalf("Claimed=%v Takeover=%v, want a fresh claim", res.Claimed, res.Takeover)
	}
	r := res.Record
	if r.Key != k || r.Fingerprint != fpA || r.State != idem.StateInProgress || r.Attempts != 1 || r.Response != nil {
		t.Errorf("claim = %+v", r)
	}
	if r.Token != idem.NextToken(0, b.base) {
		t.Errorf("token = %d, want NextToken(0, now) = %d", r.Token, idem.NextToken(0, b.base))
	}
	checkTime(t, "LeaseUntil", r.LeaseUntil, b.base.Add(lease))
	checkTime(t, "ExpiresAt", r.ExpiresAt, b.base.Add(window))
	checkTime(t, "CreatedAt", r.CreatedAt, b.base)
	checkSame(t, "Get after claim", mustGet(t, b.store, k), r)
}

func (s suite) reserveExisting(t *testing.T, b *bundle) {
	k := b.key("existing")
	claim := mustClaim(t, b.store, k, fpA, b.base)
	for _, fp := range []string{fpA, fpB} {
		res := mustReserve(t, b.store, k, fp, b.base.Add(lease/2))
		if res.Claimed {
			t.Fatalf("second Reserve with live lease claimed: %+v", res.Record)
		}
		checkSame(t, "existing record", res.Record, claim)
	}
	checkSame(t, "record untouched", mustGet(t, b.store, k), claim)
}

func (s suite) concurrentReserve(t *testing.T, b *bundle) {
	for round := range s.opt.Rounds {
		k := b.key(fmt.Sprintf("race-%d", round))
		var wins atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, s.opt.Goroutines)
		for range s.opt.Goroutines {
			wg.Go(func() {
				<-start
				res, err := b.store.Reserve(context.Background(), k, fpA, b.base, lease, window)
				if err != nil {
					errs <- err
					return
				}
				if res.Claimed {
					wins.Add(1)
				} else if res.Record.State != idem.StateInProgress || res.Record.Fingerprint != fpA {
					errs <- fmt.Errorf("loser saw %+v", res.Record)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d goroutines claimed one key, want exactly 1", round, n)
		}
	}
}

func (s suite) takeover(t *testing.T, b *bundle) {
	k := b.key("takeover")
	first := mustClaim(t, b.store, k, fpA, b.base)
	// Just before the lease runs out: still held.
	if res := mustReserve(t, b.store, k, fpA, b.base.Add(lease-time.Millisecond)); res.Claimed {
		t.Fatal("claimed before the lease ran out")
	}
	later := b.base.Add(lease + time.Second)
	res := mustReserve(t, b.store, k, fpA, later)
	if !res.Claimed || !res.Takeover {
		t.Fatalf("after the lease: Claimed=%v Takeover=%v, want a takeover", res.Claimed, res.Takeover)
	}
	if res.Record.Token <= first.Token {
		t.Errorf("takeover token %d not above %d", res.Record.Token, first.Token)
	}
	if res.Record.Attempts != 2 {
		t.Errorf("attempts = %d, want 2", res.Record.Attempts)
	}
	checkTime(t, "LeaseUntil", res.Record.LeaseUntil, later.Add(lease))
	// Exactly one of many concurrent takers wins.
	latest := res.Record
	for round := range 10 {
		now := latest.LeaseUntil.Add(time.Duration(round+1) * time.Millisecond)
		var wins atomic.Int32
		var winner atomic.Value
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				r, err := b.store.Reserve(context.Background(), k, fpA, now, lease, window)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Claimed {
					wins.Add(1)
					winner.Store(r.Record)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("takeover round %d: %d winners, want 1", round, wins.Load())
		}
		latest = winner.Load().(idem.Record)
	}
}

func (s suite) noTakeoverOtherFingerprint(t *testing.T, b *bundle) {
	k := b.key("other-fp")
	claim := mustClaim(t, b.store, k, fpA, b.base)
	res := mustReserve(t, b.store, k, fpB, b.base.Add(lease+time.Second))
	if res.Claimed {
		t.Fatal("took over a stale lease with a different fingerprint")
	}
	checkSame(t, "existing record", res.Record, claim)
}

func (s suite) fencing(t *testing.T, b *bundle) {
	c := ctx(t)
	k := b.key("fence")
	old := mustClaim(t, b.store, k, fpA, b.base)
	now := b.base.Add(lease + time.Second)
	cur := mustClaim(t, b.store, k, fpA, now)
	resp := idem.Response{Status: 201, Body: []byte("stale")}
	if err := b.store.Complete(c, k, old.Token, resp, now, now.Add(window)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Complete with stale token: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Release(c, k, old.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Release with stale token: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Extend(c, k, old.Token, now.Add(time.Hour)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Extend with stale token: %v, want ErrLeaseLost", err)
	}
	checkSame(t, "record after stale calls", mustGet(t, b.store, k), cur)

	// A token never claimed, and a key never claimed.
	if err := b.store.Complete(c, k, cur.Token+1000, resp, now, now.Add(window)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Complete with unknown token: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Release(c, b.key("never"), 1); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Release of missing key: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Extend(c, b.key("never"), 1, now); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Extend of missing key: %v, want ErrLeaseLost", err)
	}
	if _, err := b.store.Get(c, b.key("never")); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Get of missing key after fenced calls: %v, want ErrNotFound", err)
	}

	// A completed record is fenced too: its holder cannot complete, release or extend again.
	if err := b.store.Complete(c, k, cur.Token, resp, now, now.Add(window)); err != nil {
		t.Fatal(err)
	}
	done := mustGet(t, b.store, k)
	if err := b.store.Complete(c, k, cur.Token, idem.Response{Status: 500}, now, now.Add(window)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("second Complete: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Release(c, k, cur.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Release after Complete: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Extend(c, k, cur.Token, now.Add(2*window)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Extend after Complete: %v, want ErrLeaseLost", err)
	}
	checkSame(t, "completed record after fenced calls", mustGet(t, b.store, k), done)
}

func (s suite) completeAndReplay(t *testing.T, b *bundle) {
	c := ctx(t)
	k := b.key("complete")
	claim := mustClaim(t, b.store, k, fpA, b.base)
	resp := idem.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)}
	done := b.base.Add(time.Second)
	exp := done.Add(window)
	if err := b.store.Complete(c, k, claim.Token, resp, done, exp); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	// The caller may reuse its buffers once Complete returns (idemhttp does): the store must
	// have kept its own copy. Scribble over everything the caller handed in.
	kept := idem.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)}
	copy(resp.Body, "XXXXXXXX")
	resp.Header["Content-Type"][0] = "text/plain"
	resp.Header["X-Added"] = []string{"later"}
	want := claim
	want.State, want.Response, want.CompletedAt, want.ExpiresAt = idem.StateCompleted, &kept, done, exp
	checkSame(t, "Get after Complete", mustGet(t, b.store, k), want)
	// Reserve returns the completed record, even long after the lease and with another fp.
	for _, fp := range []string{fpA, fpB} {
		res := mustReserve(t, b.store, k, fp, b.base.Add(lease*3))
		if res.Claimed {
			t.Fatal("Reserve claimed a completed record")
		}
		checkSame(t, "Reserve of completed record", res.Record, want)
	}
}

func (s suite) releaseThenReclaim(t *testing.T, b *bundle) {
	c := ctx(t)
	k := b.key("release")
	claim := mustClaim(t, b.store, k, fpA, b.base)
	if err := b.store.Release(c, k, claim.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if rec, err := b.store.Get(c, k); err == nil && !rec.Expired(b.base) {
		t.Fatalf("released record is still live: %+v", rec)
	} else if err != nil && !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get after Release: %v", err)
	}
	// The released token is dead: a late heartbeat cannot resurrect the claim.
	if err := b.store.Extend(c, k, claim.Token, b.base.Add(window)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Extend after Release: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(window)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Complete after Release: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Release(c, k, claim.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("second Release: %v, want ErrLeaseLost", err)
	}
	// Reclaimed at the same instant, even with another fingerprint, with a larger token.
	res := mustReserve(t, b.store, k, fpB, b.base)
	if !res.Claimed || res.Takeover {
		t.Fatalf("Reserve after Release: Claimed=%v Takeover=%v, want a fresh claim", res.Claimed, res.Takeover)
	}
	if res.Record.Token <= claim.Token {
		t.Errorf("token after release %d not above %d", res.Record.Token, claim.Token)
	}
	if res.Record.Attempts != 1 || res.Record.Fingerprint != fpB {
		t.Errorf("reclaimed record %+v", res.Record)
	}
	// The released holder is fenced off the new claim.
	if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(window)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Complete by released holder: %v, want ErrLeaseLost", err)
	}
}

func (s suite) extend(t *testing.T, b *bundle) {
	c := ctx(t)
	k := b.key("extend")
	claim := mustClaim(t, b.store, k, fpA, b.base)
	until := b.base.Add(3 * lease)
	if err := b.store.Extend(c, k, claim.Token, until); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	rec := mustGet(t, b.store, k)
	checkTime(t, "LeaseUntil after Extend", rec.LeaseUntil, until)
	if rec.Token != claim.Token || rec.State != idem.StateInProgress {
		t.Errorf("Extend changed the claim: %+v", rec)
	}
	if res := mustReserve(t, b.store, k, fpA, b.base.Add(2*lease)); res.Claimed {
		t.Fatal("taken over within an extended lease")
	}
	// Extending past the window keeps the record alive past its old ExpiresAt.
	far := b.base.Add(2 * window)
	if err := b.store.Extend(c, k, claim.Token, far); err != nil {
		t.Fatalf("Extend past window: %v", err)
	}
	rec = mustGet(t, b.store, k)
	if rec.ExpiresAt.Before(far.Truncate(time.Microsecond)) {
		t.Errorf("ExpiresAt %v is before the extended lease %v", rec.ExpiresAt, far)
	}
	if res := mustReserve(t, b.store, k, fpA, b.base.Add(window+time.Minute)); res.Claimed {
		t.Fatal("claimed a record whose lease was extended past its window")
	}
}

func (s suite) expiredIsAbsent(t *testing.T, b *bundle) {
	c := ctx(t)
	k := b.key("expired")
	claim := mustClaim(t, b.store, k, fpA, b.base)
	exp := b.base.Add(time.Minute)
	if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200, Body: []byte("old")}, b.base, exp); err != nil {
		t.Fatal(err)
	}
	// Just before expiry it replays; at expiry it is absent, even with another fingerprint.
	if res := mustReserve(t, b.store, k, fpA, exp.Add(-time.Millisecond)); res.Claimed {
		t.Fatal("claimed before expiry")
	}
	res := mustReserve(t, b.store, k, fpB, exp)
	if !res.Claimed || res.Takeover {
		t.Fatalf("Reserve at expiry: Claimed=%v Takeover=%v, want a fresh claim", res.Claimed, res.Takeover)
	}
	if res.Record.Response != nil || res.Record.Fingerprint != fpB || res.Record.Attempts != 1 || res.Record.Token <= claim.Token {
		t.Errorf("new claim over expired record: %+v", res.Record)
	}
	checkTime(t, "CreatedAt", res.Record.CreatedAt, exp)
	checkTime(t, "CompletedAt", res.Record.CompletedAt, time.Time{})
}

func (s suite) expiredInProgressIsAbsent(t *testing.T, b *bundle) {
	k := b.key("expired-in-progress")
	const shortWindow = 2 * lease
	res, err := b.store.Reserve(ctx(t), k, fpA, b.base, lease, shortWindow)
	if err != nil || !res.Claimed {
		t.Fatalf("Reserve: %v %+v", err, res)
	}
	// Past the window, another fingerprint claims it: expired counts as absent.
	got := mustReserve(t, b.store, k, fpB, b.base.Add(shortWindow))
	if !got.Claimed || got.Takeover {
		t.Fatalf("Claimed=%v Takeover=%v, want a fresh claim", got.Claimed, got.Takeover)
	}
}

func (s suite) sweep(t *testing.T, b *bundle) {
	c := ctx(t)
	const expired, live, batch = 7, 3, 3
	for i := range expired + live {
		k := b.key(fmt.Sprintf("sweep-%d", i))
		claim := mustClaim(t, b.store, k, fpA, b.base)
		exp := b.base.Add(time.Minute)
		if i >= expired {
			exp = b.base.Add(window)
		}
		if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, exp); err != nil {
			t.Fatal(err)
		}
	}
	now := b.base.Add(2 * time.Minute)
	total := 0
	for {
		n, err := b.store.Sweep(c, now, batch)
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		if n > batch {
			t.Fatalf("Sweep deleted %d, more than its batch %d", n, batch)
		}
		total += n
		if n < batch {
			break
		}
	}
	// Stores shared across subtests may hold other expired records; ours must be gone.
	if total < expired {
		t.Errorf("swept %d records, want at least %d", total, expired)
	}
	for i := range expired + live {
		k := b.key(fmt.Sprintf("sweep-%d", i))
		_, err := b.store.Get(c, k)
		if i < expired && !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("expired %s after sweep: %v, want ErrNotFound", k, err)
		}
		if i >= expired && err != nil {
			t.Errorf("live %s after sweep: %v", k, err)
		}
	}
	if n, err := b.store.Sweep(c, now, 0); err != nil || n != 0 {
		t.Errorf("Sweep with batch 0 = %d, %v; want 0, nil", n, err)
	}
}

// sweepKeepsLiveClaims: Sweep decides on expires_at alone. A claim whose window is still open
// is kept whether its lease is held or ran out (a holder that died leaves it for a takeover,
// not for the sweeper); claims whose window closed, and released ones, are deleted.
func (s suite) sweepKeepsLiveClaims(t *testing.T, b *bundle) {
	c := ctx(t)
	now := b.base.Add(2 * lease)
	held, stale := b.key("sweep-held"), b.key("sweep-stale")
	// The held claim's lease runs past now; the stale one's ran out at base+lease.
	if res, err := b.store.Reserve(c, held, fpA, b.base, 3*lease, window); err != nil || !res.Claimed {
		t.Fatalf("Reserve(%q) = %+v, %v", held, res, err)
	}
	staleRec := mustClaim(t, b.store, stale, fpA, b.base)
	gone, released := b.key("sweep-window-closed"), b.key("sweep-released")
	if res, err := b.store.Reserve(c, gone, fpA, b.base, lease/2, lease); err != nil || !res.Claimed {
		t.Fatalf("Reserve(%q) = %+v, %v", gone, res, err)
	}
	rel := mustClaim(t, b.store, released, fpA, b.base)
	if err := b.store.Release(c, released, rel.Token); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := b.store.Sweep(c, now, 100)
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		if n < 100 {
			break
		}
	}
	for _, k := range []string{held, stale} {
		rec, err := b.store.Get(c, k)
		if err != nil {
			t.Fatalf("in-progress %s within its window after Sweep: %v, want it kept", k, err)
		}
		if rec.State != idem.StateInProgress || !rec.ExpiresAt.After(now) {
			t.Fatalf("%s after Sweep: %+v", k, rec)
		}
	}
	for _, k := range []string{gone, released} {
		if _, err := b.store.Get(c, k); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("%s after Sweep: %v, want ErrNotFound", k, err)
		}
	}
	// The stale claim is still there to be taken over.
	res := mustReserve(t, b.store, stale, fpA, now)
	if !res.Claimed || !res.Takeover || res.Record.Token <= staleRec.Token {
		t.Fatalf("takeover of the stale claim after Sweep: %+v", res)
	}
}

func (s suite) roundTrip(t *testing.T, b *bundle) {
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	big[0], big[len(big)-1], big[len(big)/2] = 0, 0, 0
	long := strings.Repeat("é", 127) + "k" // 255 bytes of UTF-8
	cases := []struct {
		name string
		key  string
		resp idem.Response
	}{
		{"empty body", "empty", idem.Response{Status: 204}},
		{"no status", "nostatus", idem.Response{Body: []byte("consumer result")}},
		{"binary 1MiB", "binary", idem.Response{Status: 200, Body: big, Header: map[string][]string{"Content-Type": {"application/octet-stream"}}}},
		{"multi headers", "headers", idem.Response{Status: 201, Header: map[string][]string{
			"Set-Cookie": {"b=2", "a=1", "a=1"}, "X-Empty": {""}, "Link": {"<x>; rel=next"},
		}, Body: []byte("ok")}},
		{"omitted body", "omitted", idem.Response{Status: 200, BodyOmitted: true, Header: map[string][]string{"X-A": {"1"}}}},
		{"255-byte utf-8 key", long, idem.Response{Status: 200, Body: []byte("unicode ✓")}},
		{"odd key", "k\t\"'\\%_*?/\u00a0∑😀", idem.Response{Status: 202}},
	}
	c := ctx(t)
	for _, tc := range cases {
		k := b.key(tc.key)
		claim := mustClaim(t, b.store, k, fpA, b.base)
		if err := b.store.Complete(c, k, claim.Token, tc.resp, b.base, b.base.Add(window)); err != nil {
			t.Fatalf("%s: Complete: %v", tc.name, err)
		}
		for _, get := range []func() idem.Record{
			func() idem.Record { return mustGet(t, b.store, k) },
			func() idem.Record { return mustReserve(t, b.store, k, fpA, b.base.Add(time.Second)).Record },
		} {
			rec := get()
			if rec.Key != k || rec.Response == nil {
				t.Fatalf("%s: record %+v", tc.name, rec)
			}
			if !rec.Response.Equal(tc.resp) {
				t.Errorf("%s: response did not round-trip:\n got %+v\nwant %+v", tc.name, abbreviate(*rec.Response), abbreviate(tc.resp))
			}
		}
	}
}

func abbreviate(r idem.Response) idem.Response {
	if len(r.Body) > 64 {
		r.Body = append(r.Body[:32:32], []byte("…")...)
	}
	return r
}

func (s suite) getMissing(t *testing.T, b *bundle) {
	if _, err := b.store.Get(ctx(t), b.key("missing")); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Get of missing key: %v, want ErrNotFound", err)
	}
}

func (s suite) cancelledContext(t *testing.T, b *bundle) {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	k := b.key("cancelled")
	start := time.Now()
	if _, err := b.store.Reserve(c, k, fpA, b.base, lease, window); err == nil {
		t.Error("Reserve with a cancelled context succeeded")
	}
	if _, err := b.store.Get(c, k); err == nil {
		t.Error("Get with a cancelled context succeeded")
	}
	if _, err := b.store.Sweep(c, b.base, 10); err == nil {
		t.Error("Sweep with a cancelled context succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancelled calls took %v", d)
	}
	if _, err := b.store.Get(ctx(t), k); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("after cancelled Reserve, Get: %v, want ErrNotFound (no half-written record)", err)
	}
	claim := mustClaim(t, b.store, k, fpA, b.base)
	if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(window)); err == nil {
		t.Error("Complete with a cancelled context succeeded")
	}
	if err := b.store.Release(c, k, claim.Token); err == nil {
		t.Error("Release with a cancelled context succeeded")
	}
	if err := b.store.Extend(c, k, claim.Token, b.base.Add(window)); err == nil {
		t.Error("Extend with a cancelled context succeeded")
	}
	checkSame(t, "record after cancelled calls", mustGet(t, b.store, k), claim)

	// A deadline that runs out mid-call returns promptly too.
	short, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	time.Sleep(2 * time.Millisecond)
	start = time.Now()
	_, _ = b.store.Reserve(short, b.key("deadline"), fpA, b.base, lease, window)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Reserve past its deadline took %v", d)
	}
}

func (s suite) completeRacesTakeover(t *testing.T, b *bundle) {
	rounds := max(10, s.opt.Rounds/2)
	for round := range rounds {
		k := b.key(fmt.Sprintf("crace-%d", round))
		old := mustClaim(t, b.store, k, fpA, b.base)
		later := b.base.Add(lease + time.Second)
		resp := idem.Response{Status: 200, Body: []byte("first holder")}
		var completeErr error
		var res idem.Reservation
		var resErr error
		var wg sync.WaitGroup
		wg.Go(func() {
			completeErr = b.store.Complete(context.Background(), k, old.Token, resp, later, later.Add(window))
		})
		wg.Go(func() {
			res, resErr = b.store.Reserve(context.Background(), k, fpA, later, lease, window)
		})
		wg.Wait()
		if resErr != nil {
			t.Fatal(resErr)
		}
		final := mustGet(t, b.store, k)
		switch {
		case completeErr == nil && !res.Claimed:
			if final.State != idem.StateCompleted || final.Token != old.Token {
				t.Fatalf("round %d: complete won but record is %+v", round, final)
			}
		case errors.Is(completeErr, idem.ErrLeaseLost) && res.Claimed:
			if final.State != idem.StateInProgress || final.Token != res.Record.Token {
				t.Fatalf("round %d: takeover won but record is %+v", round, final)
			}
		default:
			t.Fatalf("round %d: Complete err=%v, Reserve claimed=%v: want exactly one winner", round, completeErr, res.Claimed)
		}
	}
}

func (s suite) manyKeys(t *testing.T, b *bundle) {
	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				k := b.key(fmt.Sprintf("many-%d-%d", w, i))
				res, err := b.store.Reserve(context.Background(), k, fpA, b.base, lease, window)
				if err != nil || !res.Claimed {
					t.Errorf("Reserve %s: %v claimed=%v", k, err, res.Claimed)
					return
				}
				body := []byte(k)
				if err := b.store.Complete(context.Background(), k, res.Record.Token, idem.Response{Status: 200, Body: body}, b.base, b.base.Add(window)); err != nil {
					t.Errorf("Complete %s: %v", k, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for w := range workers {
		for i := range perWorker {
			k := b.key(fmt.Sprintf("many-%d-%d", w, i))
			rec := mustGet(t, b.store, k)
			if rec.State != idem.StateCompleted || !bytes.Equal(rec.Response.Body, []byte(k)) {
				t.Fatalf("%s: %+v", k, rec)
			}
		}
	}
}

func (s suite) closed(t *testing.T, b *bundle) {
	if s.opt.SkipClose {
		t.Skip("storetest: closed-store test skipped by the backend's Options.SkipClose")
	}
	cl, ok := b.store.(io.Closer)
	if !ok {
		t.Skip("storetest: store has no Close method; closed-store test skipped")
	}
	k := b.key("closed")
	claim := mustClaim(t, b.store, k, fpA, b.base)
	if err := cl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c := ctx(t)
	closed := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, idem.ErrClosed) || !errors.Is(err, idem.ErrStoreUnavailable) {
			t.Errorf("%s on a closed store: %v, want idem.ErrClosed (idem.ErrStoreUnavailable)", op, err)
		}
	}
	_, err := b.store.Reserve(c, b.key("after-close"), fpA, b.base, lease, window)
	closed("Reserve", err)
	closed("Complete", b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(window)))
	closed("Extend", b.store.Extend(c, k, claim.Token, b.base.Add(window)))
	closed("Release", b.store.Release(c, k, claim.Token))
	_, err = b.store.Get(c, k)
	closed("Get", err)
	_, err = b.store.Sweep(c, b.base, 10)
	closed("Sweep", err)
	_ = cl.Close() // a second Close must not panic
}

// invalidKeys: every store refuses the keys idem.CheckKey refuses, with idem.ErrInvalidInput
// and without touching a record, and accepts the longest valid one.
func (s suite) invalidKeys(t *testing.T, b *bundle) {
	c := ctx(t)
	for name, key := range map[string]string{
		"empty":      "",
		"too long":   b.key(strings.Repeat("k", idem.MaxKeyLen)),
		"not UTF-8":  b.key("k\xff"),
		"with a NUL": b.key("k\x00"),
	} {
		if res, err := b.store.Reserve(c, key, fpA, b.base, lease, window); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("Reserve of a key %s = %+v, %v; want idem.ErrInvalidInput", name, res, err)
		}
	}
	longest := b.key(strings.Repeat("k", idem.MaxKeyLen-len(b.key(""))))
	if res := mustReserve(t, b.store, longest, fpA, b.base); !res.Claimed {
		t.Fatalf("Reserve of a %d-byte key did not claim: %+v", len(longest), res)
	}
}

func (s suite) delete(t *testing.T, b *bundle) {
	d, ok := b.store.(idem.Deleter)
	if !ok {
		t.Skip("storetest: store does not implement idem.Deleter; Delete test skipped")
	}
	c := ctx(t)
	k := b.key("delete")
	claim := mustClaim(t, b.store, k, fpA, b.base)
	if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(window)); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(c, k); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := b.store.Get(c, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := d.Delete(c, k); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if res := mustReserve(t, b.store, k, fpB, b.base); !res.Claimed {
		t.Fatal("a deleted key cannot be claimed again")
	}
}

// loserGetsBlockingRecord: a Reserve that loses returns the record that blocked it, never an
// older version (one read from a snapshot, or between the statements of a multi-step claim).
// The record changes all the time (claimed, released, claimed again, completed with a short
// window and swept) while others reserve it; every record a loser gets must be one that, at
// its time, could not be claimed.
func (s suite) loserGetsBlockingRecord(t *testing.T, b *bundle) {
	c := ctx(t)
	k := b.key("hot")
	const lease, window = time.Minute, time.Hour
	stop := make(chan struct{})
	var churn sync.WaitGroup
	for w := range 2 {
		churn.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				now := time.Now()
				res, err := b.store.Reserve(c, k, fpA, now, lease, window)
				if err != nil {
					t.Error(err)
					return
				}
				if !res.Claimed {
					continue
				}
				if (i+w)%2 == 0 {
					_ = b.store.Release(c, k, res.Record.Token)
				} else {
					_ = b.store.Complete(c, k, res.Record.Token, idem.Response{Status: 200}, now, now.Add(time.Millisecond))
				}
			}
		})
	}
	churn.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = b.store.Sweep(c, time.Now(), 10)
		}
	})
	var checked atomic.Int64
	var readers sync.WaitGroup
	for range 6 {
		readers.Go(func() {
			for range 100 {
				now := time.Now()
				res, err := b.store.Reserve(c, k, fpB, now, lease, window)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Claimed {
					_ = b.store.Release(c, k, res.Record.Token) // let the writers go on
					continue
				}
				checked.Add(1)
				if rec := res.Record; rec.Expired(now) {
					t.Errorf("loser got a record that was expired at its time: %+v (now %v)", rec, now)
					return
				}
			}
		})
	}
	readers.Wait()
	close(stop)
	churn.Wait()
	t.Logf("%d losing reservations checked", checked.Load())
}
