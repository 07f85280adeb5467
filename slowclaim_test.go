package idem_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// slowReserveStore is a memstore whose Reserve lands late: it waits before it writes, so the
// claim's lease, which runs from the time the engine took before calling, is mostly spent
// when the claim returns (a store restarting, a saturated connection pool). Extensions fail
// with lostExtend set, as when another process took the key over.
type slowReserveStore struct {
	*memstore.Store
	delay      time.Duration
	slow       atomic.Bool
	lostExtend atomic.Bool
	extends    atomic.Int64
	landed     chan struct{} // closed when a slow Reserve has claimed (if not nil)
	landOnce   sync.Once
}

func (s *slowReserveStore) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	if !s.slow.Load() {
		return s.Store.Reserve(ctx, req)
	}
	time.Sleep(s.delay)
	res, err := s.Store.Reserve(ctx, req)
	if err == nil && res.Claimed && s.landed != nil {
		s.landOnce.Do(func() { close(s.landed) })
	}
	return res, err
}

func (s *slowReserveStore) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	s.extends.Add(1)
	if s.lostExtend.Load() {
		return idem.ErrLeaseLost
	}
	return s.Store.Extend(ctx, key, token, until)
}

// TestSlowClaimNeverRunsOnASpentLease: a claim that lands when most of its lease is gone must
// not start the effect on it. Another process polls the key all the while the first effect
// runs; without a renewal before the effect, it takes the key over as soon as the short lease
// ends and runs the effect a second time.
func TestSlowClaimNeverRunsOnASpentLease(t *testing.T) {
	t.Parallel()
	const lease = 600 * time.Millisecond
	st := &slowReserveStore{Store: memstore.New(), delay: lease * 9 / 10, landed: make(chan struct{})}
	slow, err := idem.New(st, idem.Options{Lease: lease, Heartbeat: lease / 3})
	if err != nil {
		t.Fatal(err)
	}
	other, err := idem.New(st.Store, idem.Options{Lease: lease, Heartbeat: lease / 3})
	if err != nil {
		t.Fatal(err)
	}
	fp := idem.Fingerprint([]byte("slow claim"))
	var running, effects atomic.Int64
	effect := func(hold time.Duration) idem.Func {
		return func(ctx context.Context) (idem.Response, error) {
			effects.Add(1)
			if running.Add(1) > 1 {
				t.Errorf("two effects run at once under one key")
			}
			defer running.Add(-1)
			time.Sleep(hold)
			return idem.Response{Status: 201, Body: []byte("done")}, nil
		}
	}
	st.slow.Store(true)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		res, err := slow.Do(context.Background(), "k", fp, effect(2*lease))
		if err != nil || !res.Executed {
			t.Errorf("the slow claim: Executed %v, err %v; want its effect run and stored", res.Executed, err)
		}
	})
	wg.Go(func() {
		<-st.landed // the other process comes once the slow claim is in the store
		for {
			select {
			case <-done:
				return
			default:
			}
			_, err := other.Do(context.Background(), "k", fp, effect(0))
			if err != nil && !errors.Is(err, idem.ErrInFlight) {
				t.Errorf("the other process: %v", err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	wg.Wait()
	if n := effects.Load(); n != 1 {
		t.Fatalf("the effect ran %d times, want 1", n)
	}
	if st.extends.Load() == 0 {
		t.Fatal("no extension: the slow claim was not renewed before its effect")
	}
}

// TestSlowClaimLostBeforeTheEffect: when the renewal of a late claim finds the key taken over
// (or released by an operator), the effect does not run under it; the caller looks at the key
// again and gets what is there.
func TestSlowClaimLostBeforeTheEffect(t *testing.T) {
	t.Parallel()
	const lease = 400 * time.Millisecond
	st := &slowReserveStore{Store: memstore.New(), delay: lease * 9 / 10}
	eng, err := idem.New(st, idem.Options{Lease: lease, Heartbeat: lease / 3})
	if err != nil {
		t.Fatal(err)
	}
	st.slow.Store(true)
	st.lostExtend.Store(true)
	var effects atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 3*lease)
	defer cancel()
	_, err = eng.Do(ctx, "k", idem.Fingerprint([]byte("lost")), func(context.Context) (idem.Response, error) {
		effects.Add(1)
		return idem.Response{Status: 201}, nil
	})
	if effects.Load() != 0 {
		t.Fatalf("the effect ran %d times under a claim whose renewal was refused", effects.Load())
	}
	if err == nil {
		t.Fatal("Do returned no error although no claim could be renewed")
	}
}

// TestFastClaimNotRenewed: a claim that lands at once is not extended before its effect (the
// common path costs no extra store call).
func TestFastClaimNotRenewed(t *testing.T) {
	t.Parallel()
	st := &slowReserveStore{Store: memstore.New()}
	eng, err := idem.New(st, idem.Options{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Do(context.Background(), "k", idem.Fingerprint([]byte("fast")), func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 201}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := st.extends.Load(); n != 0 {
		t.Fatalf("%d extensions for a claim that landed at once, want 0", n)
	}
}

// TestSlowClaimWithHeartbeatsLeftNotRenewed: with a heartbeat, a claim that lands late but
// still holds two heartbeats of lease starts its effect without an extension first (the
// heartbeat renews it in time); only a claim left with less than that is renewed before.
func TestSlowClaimWithHeartbeatsLeftNotRenewed(t *testing.T) {
	t.Parallel()
	const lease, heartbeat = 2 * time.Second, 100 * time.Millisecond
	// About 600ms of lease left when the claim lands: more than two heartbeats (200ms), less
	// than half the lease (1s), with room for a slow machine on both sides.
	st := &slowReserveStore{Store: memstore.New(), delay: 1400 * time.Millisecond}
	st.slow.Store(true)
	eng, err := idem.New(st, idem.Options{Lease: lease, Heartbeat: heartbeat})
	if err != nil {
		t.Fatal(err)
	}
	before := int64(-1)
	if _, err := eng.Do(context.Background(), "k", idem.Fingerprint([]byte("late")), func(context.Context) (idem.Response, error) {
		before = st.extends.Load()
		return idem.Response{Status: 201}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if before != 0 {
		t.Fatalf("%d extensions before the effect of a claim with more than two heartbeats of lease left, want 0", before)
	}
}
