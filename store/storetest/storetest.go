package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
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
		{"AttemptsAcrossReleases", s.attemptsAcrossReleases},
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
		{"List", s.list},
		{"ListNewestFirst", s.newest},
		{"Route", s.route},
		{"Request", s.request},
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
	lease = 10 * time.Second
	ttl   = time.Hour
)

var (
	fpA = idem.Fingerprint([]byte("a"))
	fpB = idem.Fingerprint([]byte("b"))
)

func mustReserve(t *testing.T, st idem.Store, key, fp string, now time.Time) idem.Reservation {
	t.Helper()
	res, err := st.Reserve(ctx(t), idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: lease, TTL: ttl})
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
		got.Token != want.Token || got.Attempts != want.Attempts || got.Starts != want.Starts ||
		!sameTime(got.LeaseUntil, want.LeaseUntil) || !sameTime(got.ExpiresAt, want.ExpiresAt) ||
		!sameTime(got.CreatedAt, want.CreatedAt) || !sameTime(got.CompletedAt, want.CompletedAt) ||
		got.Route != want.Route || !got.Request.Equal(want.Request) ||
		(got.Response == nil) != (want.Response == nil) ||
		(got.Response != nil && !got.Response.Equal(*want.Response)) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}
