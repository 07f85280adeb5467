package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func (s suite) fencing(t *testing.T, b *bundle) {
	c := ctx(t)
	k := b.key("fence")
	old := mustClaim(t, b.store, k, fpA, b.base)
	now := b.base.Add(lease + time.Second)
	cur := mustClaim(t, b.store, k, fpA, now)
	resp := idem.Response{Status: 201, Body: []byte("stale")}
	if err := b.store.Complete(c, k, old.Token, resp, now, now.Add(ttl)); !errors.Is(err, idem.ErrLeaseLost) {
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
	if err := b.store.Complete(c, k, cur.Token+1000, resp, now, now.Add(ttl)); !errors.Is(err, idem.ErrLeaseLost) {
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
	if err := b.store.Complete(c, k, cur.Token, resp, now, now.Add(ttl)); err != nil {
		t.Fatal(err)
	}
	done := mustGet(t, b.store, k)
	if err := b.store.Complete(c, k, cur.Token, idem.Response{Status: 500}, now, now.Add(ttl)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("second Complete: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Release(c, k, cur.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Release after Complete: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Extend(c, k, cur.Token, now.Add(2*ttl)); !errors.Is(err, idem.ErrLeaseLost) {
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
	exp := done.Add(ttl)
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
	if err := b.store.Extend(c, k, claim.Token, b.base.Add(ttl)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Extend after Release: %v, want ErrLeaseLost", err)
	}
	if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(ttl)); !errors.Is(err, idem.ErrLeaseLost) {
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
	if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(ttl)); !errors.Is(err, idem.ErrLeaseLost) {
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
	// Extending past the TTL keeps the record alive past its old ExpiresAt.
	far := b.base.Add(2 * ttl)
	if err := b.store.Extend(c, k, claim.Token, far); err != nil {
		t.Fatalf("Extend past ttl: %v", err)
	}
	rec = mustGet(t, b.store, k)
	if rec.ExpiresAt.Before(far.Truncate(time.Microsecond)) {
		t.Errorf("ExpiresAt %v is before the extended lease %v", rec.ExpiresAt, far)
	}
	if res := mustReserve(t, b.store, k, fpA, b.base.Add(ttl+time.Minute)); res.Claimed {
		t.Fatal("claimed a record whose lease was extended past its ttl")
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
			completeErr = b.store.Complete(context.Background(), k, old.Token, resp, later, later.Add(ttl))
		})
		wg.Go(func() {
			res, resErr = b.store.Reserve(context.Background(), idem.ReserveRequest{Key: k, Fingerprint: fpA, Now: later, Lease: lease, TTL: ttl})
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
