package storetest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/storetest"
)

func TestMemstoreIsLinearizable(t *testing.T) {
	t.Parallel()
	for range 5 {
		res, why, err := storetest.CheckLinearizable(memstore.New(), "k", storetest.LinearizabilityOptions{})
		if err != nil || res != porcupine.Ok {
			t.Fatalf("memstore: %v %v\n%s", res, err, why)
		}
	}
}

// readThenWrite is a deliberately broken store: Reserve reads, then writes, in two steps.
type readThenWrite struct {
	*memstore.Store
	mu sync.Mutex
}

func (s *readThenWrite) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	rec, err := s.Get(ctx, req.Key)
	time.Sleep(50 * time.Microsecond) // the window where another reader sees the same state
	if err == nil && !rec.Expired(req.Now) && !(rec.LeaseExpired(req.Now) && rec.Fingerprint == req.Fingerprint) {
		return idem.Reservation{Record: rec}, nil
	}
	// Write unconditionally: release the old record's claim by force, then claim.
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		_ = s.Store.Release(ctx, req.Key, rec.Token)
	}
	return s.Store.Reserve(ctx, req)
}

// The checker must catch a store that is not atomic.
func TestCheckerCatchesReadThenWrite(t *testing.T) {
	t.Parallel()
	runs := 0
	for caught := false; !caught; {
		if runs++; runs > 30 {
			t.Fatal("the linearizability checker never caught a read-then-write store in 30 runs")
		}
		res, _, err := storetest.CheckLinearizable(&readThenWrite{Store: memstore.New()}, "k",
			storetest.LinearizabilityOptions{Clients: 8, OpsPerClient: 80, Keys: 1})
		if err != nil {
			t.Fatal(err)
		}
		caught = res == porcupine.Illegal
	}
	t.Logf("caught the broken store in run %d", runs)
}
