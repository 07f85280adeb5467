package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

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
	const shortTTL = 2 * lease
	res, err := b.store.Reserve(ctx(t), idem.ReserveRequest{Key: k, Fingerprint: fpA, Now: b.base, Lease: lease, TTL: shortTTL})
	if err != nil || !res.Claimed {
		t.Fatalf("Reserve: %v %+v", err, res)
	}
	// Past the TTL, another fingerprint claims it: expired counts as absent.
	got := mustReserve(t, b.store, k, fpB, b.base.Add(shortTTL))
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
			exp = b.base.Add(ttl)
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

// sweepKeepsLiveClaims: Sweep decides on expires_at alone. A claim whose TTL has not run out
// is kept whether its lease is held or ran out (a holder that died leaves it for a takeover,
// not for the sweeper); claims whose TTL ran out, and released ones, are deleted.
func (s suite) sweepKeepsLiveClaims(t *testing.T, b *bundle) {
	c := ctx(t)
	now := b.base.Add(2 * lease)
	held, stale := b.key("sweep-held"), b.key("sweep-stale")
	// The held claim's lease runs past now; the stale one's ran out at base+lease.
	if res, err := b.store.Reserve(c, idem.ReserveRequest{Key: held, Fingerprint: fpA, Now: b.base, Lease: 3 * lease, TTL: ttl}); err != nil || !res.Claimed {
		t.Fatalf("Reserve(%q) = %+v, %v", held, res, err)
	}
	staleRec := mustClaim(t, b.store, stale, fpA, b.base)
	gone, released := b.key("sweep-ttl-closed"), b.key("sweep-released")
	if res, err := b.store.Reserve(c, idem.ReserveRequest{Key: gone, Fingerprint: fpA, Now: b.base, Lease: lease / 2, TTL: lease}); err != nil || !res.Claimed {
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
			t.Fatalf("in-progress %s within its ttl after Sweep: %v, want it kept", k, err)
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
