package storetest

import (
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// attemptsAcrossReleases checks that a record counts every start of its effect: an attempt
// that fails releases the key, the client retries with the same request, and the record goes
// on counting from its first claim (Starts +1, CreatedAt kept, not a takeover: Attempts 1). A takeover
// after the lease ran out counts too; a replay of the completed record does not; a claim after
// the record expired, or after a release by another request, starts again at 1. It runs once
// with claims without a route and once with claims that name one.
func (s suite) attemptsAcrossReleases(t *testing.T, b *bundle) {
	for _, viaRoute := range []bool{false, true} {
		name := "reserve"
		if viaRoute {
			name = "route"
		}
		reserve := func(key, fp string, now time.Time) idem.Reservation {
			t.Helper()
			if !viaRoute {
				return mustReserve(t, b.store, key, fp, now)
			}
			res, err := b.store.Reserve(ctx(t), idem.ReserveRequest{Key: key, Fingerprint: fp, Route: "POST /pay", Now: now, Lease: lease, TTL: ttl})
			if err != nil {
				t.Fatalf("Reserve(%q) with a route: %v", key, err)
			}
			return res
		}
		s.attemptsSequence(t, b, b.key(name+"-seq"), reserve)
		s.attemptsTakeover(t, b, b.key(name+"-takeover"), reserve)
		s.attemptsRestart(t, b, b.key(name+"-restart"), reserve)
	}
}

type reserveFunc func(key, fp string, now time.Time) idem.Reservation

// claimAgain reserves key and fails unless it is claimed as the start-th start of a record
// first claimed at first, with attempts and takeover as wanted.
func claimAgain(t *testing.T, reserve reserveFunc, key string, now, first time.Time, start, attempts int, takeover bool) idem.Record {
	t.Helper()
	res := reserve(key, fpA, now)
	if !res.Claimed || res.Takeover != takeover {
		t.Fatalf("start %d: Claimed=%v Takeover=%v, want claimed, takeover %v (record %+v)", start, res.Claimed, res.Takeover, takeover, res.Record)
	}
	if res.Record.Starts != start || res.Record.Attempts != attempts {
		t.Errorf("start %d: Starts = %d, Attempts = %d, want %d and %d", start, res.Record.Starts, res.Record.Attempts, start, attempts)
	}
	checkTime(t, "CreatedAt", res.Record.CreatedAt, first)
	checkTime(t, "LeaseUntil", res.Record.LeaseUntil, now.Add(lease))
	checkTime(t, "ExpiresAt", res.Record.ExpiresAt, now.Add(ttl))
	return res.Record
}

// attemptsSequence: claim → release → claim → release → claim → complete gives 3 starts and
// the first claim's time; a replay leaves them.
func (s suite) attemptsSequence(t *testing.T, b *bundle, k string, reserve reserveFunc) {
	c := ctx(t)
	var rec idem.Record
	for i := 1; i <= 3; i++ {
		now := b.base.Add(time.Duration(i-1) * time.Second)
		prev := rec
		rec = claimAgain(t, reserve, k, now, b.base, i, 1, false)
		if i > 1 && rec.Token <= prev.Token {
			t.Errorf("attempt %d: token %d not above %d", i, rec.Token, prev.Token)
		}
		if i < 3 {
			if err := b.store.Release(c, k, rec.Token); err != nil {
				t.Fatalf("Release %d: %v", i, err)
			}
		}
	}
	if got := mustGet(t, b.store, k); got.Starts != 3 || !sameTime(got.CreatedAt, b.base) {
		t.Errorf("Get while the third attempt runs: Starts %d CreatedAt %v, want 3 and %v", got.Starts, got.CreatedAt, b.base)
	}
	done := b.base.Add(3 * time.Second)
	if err := b.store.Complete(c, k, rec.Token, idem.Response{Status: 201}, done, done.Add(ttl)); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	replay := reserve(k, fpA, done.Add(time.Second))
	if replay.Claimed || replay.Record.State != idem.StateCompleted || replay.Record.Starts != 3 || !sameTime(replay.Record.CreatedAt, b.base) {
		t.Errorf("replay: Claimed=%v record %+v, want the completed record with 3 attempts since %v", replay.Claimed, replay.Record, b.base)
	}
	got := mustGet(t, b.store, k)
	if got.State != idem.StateCompleted || got.Starts != 3 || got.Attempts != 1 {
		t.Errorf("completed record: State %v Starts %d Attempts %d, want completed, 3 and 1", got.State, got.Starts, got.Attempts)
	}
	checkTime(t, "completed CreatedAt", got.CreatedAt, b.base)
	checkTime(t, "CompletedAt", got.CompletedAt, done)
}

// attemptsTakeover: a release, a retry, then a takeover after the retry's lease ran out: 3.
func (s suite) attemptsTakeover(t *testing.T, b *bundle, k string, reserve reserveFunc) {
	rec := claimAgain(t, reserve, k, b.base, b.base, 1, 1, false)
	if err := b.store.Release(ctx(t), k, rec.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	second := b.base.Add(time.Second)
	claimAgain(t, reserve, k, second, b.base, 2, 1, false)
	claimAgain(t, reserve, k, second.Add(lease), b.base, 3, 2, true)
	if got := mustGet(t, b.store, k); got.Starts != 3 || got.Attempts != 2 || !sameTime(got.CreatedAt, b.base) {
		t.Errorf("after the takeover: Starts %d Attempts %d CreatedAt %v, want 3, 2 and %v", got.Starts, got.Attempts, got.CreatedAt, b.base)
	}
}

// attemptsRestart: a record that expired, or was released and then claimed by another
// request, is a new record: 1 attempt, created now.
func (s suite) attemptsRestart(t *testing.T, b *bundle, k string, reserve reserveFunc) {
	rec := claimAgain(t, reserve, k, b.base, b.base, 1, 1, false)
	if err := b.store.Release(ctx(t), k, rec.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	claimAgain(t, reserve, k, b.base.Add(time.Second), b.base, 2, 1, false)
	// The second attempt's record runs out of its TTL without a release.
	later := b.base.Add(time.Second + ttl)
	claimAgain(t, reserve, k, later, later, 1, 1, false)
	// Released, then claimed by another request: that request's record starts at 1.
	rec = mustGet(t, b.store, k)
	if err := b.store.Release(ctx(t), k, rec.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	other := later.Add(time.Second)
	res := reserve(k, fpB, other)
	if !res.Claimed || res.Takeover || res.Record.Attempts != 1 || res.Record.Starts != 1 || res.Record.Fingerprint != fpB {
		t.Errorf("claim by another request after a release: %+v", res)
	}
	checkTime(t, "CreatedAt of another request's claim", res.Record.CreatedAt, other)
}
