package storetest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

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
	if r.Token != storekit.NextToken(0, b.base) {
		t.Errorf("token = %d, want NextToken(0, now) = %d", r.Token, storekit.NextToken(0, b.base))
	}
	checkTime(t, "LeaseUntil", r.LeaseUntil, b.base.Add(lease))
	checkTime(t, "ExpiresAt", r.ExpiresAt, b.base.Add(ttl))
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
				res, err := b.store.Reserve(context.Background(), idem.ReserveRequest{Key: k, Fingerprint: fpA, Now: b.base, Lease: lease, TTL: ttl})
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
				r, err := b.store.Reserve(context.Background(), idem.ReserveRequest{Key: k, Fingerprint: fpA, Now: now, Lease: lease, TTL: ttl})
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

func (s suite) manyKeys(t *testing.T, b *bundle) {
	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				k := b.key(fmt.Sprintf("many-%d-%d", w, i))
				res, err := b.store.Reserve(context.Background(), idem.ReserveRequest{Key: k, Fingerprint: fpA, Now: b.base, Lease: lease, TTL: ttl})
				if err != nil || !res.Claimed {
					t.Errorf("Reserve %s: %v claimed=%v", k, err, res.Claimed)
					return
				}
				body := []byte(k)
				if err := b.store.Complete(context.Background(), k, res.Record.Token, idem.Response{Status: 200, Body: body}, b.base, b.base.Add(ttl)); err != nil {
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

// loserGetsBlockingRecord: a Reserve that loses returns the record that blocked it, never an
// older version (one read from a snapshot, or between the statements of a multi-step claim).
// The record changes all the time (claimed, released, claimed again, completed with a short
// TTL and swept) while others reserve it; every record a loser gets must be one that, at
// its time, could not be claimed.
func (s suite) loserGetsBlockingRecord(t *testing.T, b *bundle) {
	c := ctx(t)
	k := b.key("hot")
	const lease, ttl = time.Minute, time.Hour
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
				res, err := b.store.Reserve(c, idem.ReserveRequest{Key: k, Fingerprint: fpA, Now: now, Lease: lease, TTL: ttl})
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
				res, err := b.store.Reserve(c, idem.ReserveRequest{Key: k, Fingerprint: fpB, Now: now, Lease: lease, TTL: ttl})
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
