package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storetest"
)

// A bounded store with room to spare keeps the whole storage contract.
func TestBoundedConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store {
		s, err := NewBounded(Options{MaxRecords: 1 << 20, MaxBytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestNewBoundedRefusesNegativeBounds(t *testing.T) {
	t.Parallel()
	for _, opt := range []Options{{MaxRecords: -1}, {MaxBytes: -1}} {
		if _, err := NewBounded(opt); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("NewBounded(%+v) = %v, want ErrInvalidInput", opt, err)
		}
	}
}

// checkBytes fails unless the store's byte count is the sum of its records' costs.
func checkBytes(t *testing.T, s *Store) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum int64
	for i := range s.n {
		sum += s.cost(i)
	}
	if sum != s.bytes {
		t.Fatalf("bytes = %d, the records' costs add up to %d", s.bytes, sum)
	}
}

// A store at MaxRecords refuses new keys with ErrFull, which the engine reads as a store that
// is unavailable, and keeps every record that has not expired: in-flight claims complete,
// completed ones replay, a lapsed claim is taken over. Once records expire (or are released),
// they are reclaimed for new keys.
func TestMaxRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := NewBounded(Options{MaxRecords: 10})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	fp := idem.Fingerprint([]byte("body"))
	tokens := map[string]int64{}
	for i := range 10 {
		key := fmt.Sprint("k", i)
		// Keys 0-4 expire in a minute, 5-9 in an hour.
		window := time.Minute
		if i >= 5 {
			window = time.Hour
		}
		res, err := s.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: 10 * time.Second, TTL: window})
		if err != nil || !res.Claimed {
			t.Fatalf("Reserve(%s) = %+v, %v", key, res, err)
		}
		tokens[key] = res.Record.Token
	}
	for i := range 5 {
		key := fmt.Sprint("k", i)
		if err := s.Complete(ctx, key, tokens[key], idem.Response{Status: 201, Body: []byte(key)}, now, now.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Reserve(ctx, idem.ReserveRequest{Key: "new", Fingerprint: fp, Now: now, Lease: 10 * time.Second, TTL: time.Hour})
	if !errors.Is(err, ErrFull) || !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("Reserve past MaxRecords = %v, want ErrFull matching ErrStoreUnavailable", err)
	}
	// Keys it holds still answer: a replay, an in-flight claim, a takeover after the lease.
	if res, err := s.Reserve(ctx, idem.ReserveRequest{Key: "k0", Fingerprint: fp, Now: now, Lease: 10 * time.Second, TTL: time.Hour}); err != nil || res.Claimed || res.Record.Response == nil || string(res.Record.Response.Body) != "k0" {
		t.Fatalf("Reserve(k0) of a full store = %+v, %v; want the stored response", res, err)
	}
	if res, err := s.Reserve(ctx, idem.ReserveRequest{Key: "k7", Fingerprint: fp, Now: now, Lease: 10 * time.Second, TTL: time.Hour}); err != nil || res.Claimed {
		t.Fatalf("Reserve(k7) in flight = %+v, %v; want the claim, untouched", res, err)
	}
	later := now.Add(30 * time.Second) // past the leases, before any record expires
	res, err := s.Reserve(ctx, idem.ReserveRequest{Key: "k8", Fingerprint: fp, Now: later, Lease: 10 * time.Second, TTL: time.Hour})
	if err != nil || !res.Takeover {
		t.Fatalf("takeover of k8 in a full store = %+v, %v", res, err)
	}
	if err := s.Complete(ctx, "k9", tokens["k9"], idem.Response{Status: 200, Body: bytes.Repeat([]byte("x"), 5000)}, later, later.Add(time.Hour)); err != nil {
		t.Fatalf("Complete in a full store: %v", err)
	}
	if _, err := s.Reserve(ctx, idem.ReserveRequest{Key: "new", Fingerprint: fp, Now: later, Lease: 10 * time.Second, TTL: time.Hour}); !errors.Is(err, ErrFull) {
		t.Fatalf("Reserve before anything expired = %v, want ErrFull", err)
	}
	// A released claim is reclaimed at once.
	if err := s.Release(ctx, "k6", tokens["k6"]); err != nil {
		t.Fatal(err)
	}
	if res, err := s.Reserve(ctx, idem.ReserveRequest{Key: "new", Fingerprint: fp, Now: later, Lease: 10 * time.Second, TTL: time.Hour}); err != nil || !res.Claimed {
		t.Fatalf("Reserve after a release = %+v, %v", res, err)
	}
	if _, err := s.Reserve(ctx, idem.ReserveRequest{Key: "new2", Fingerprint: fp, Now: later, Lease: 10 * time.Second, TTL: time.Hour}); !errors.Is(err, ErrFull) {
		t.Fatalf("Reserve with the released slot taken = %v, want ErrFull", err)
	}
	// After a minute, keys 0-4 have expired: five new keys fit, a sixth does not.
	expired := now.Add(time.Minute + time.Second)
	for i := range 5 {
		if res, err := s.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprint("late", i), Fingerprint: fp, Now: expired, Lease: 10 * time.Second, TTL: time.Hour}); err != nil || !res.Claimed {
			t.Fatalf("Reserve(late%d) after expiry = %+v, %v", i, res, err)
		}
	}
	if _, err := s.Reserve(ctx, idem.ReserveRequest{Key: "late5", Fingerprint: fp, Now: expired, Lease: 10 * time.Second, TTL: time.Hour}); !errors.Is(err, ErrFull) {
		t.Fatalf("Reserve(late5) = %v, want ErrFull", err)
	}
	if s.Len() != 10 {
		t.Fatalf("Len = %d, want 10", s.Len())
	}
	// Every record that had not expired is still there, as it was.
	for _, key := range []string{"k5", "k7", "k8", "k9", "new"} {
		if rec, err := s.Get(ctx, key); err != nil || rec.Key != key {
			t.Fatalf("Get(%s) = %+v, %v", key, rec, err)
		}
	}
	if rec, _ := s.Get(ctx, "k9"); rec.State != idem.StateCompleted || len(rec.Response.Body) != 5000 {
		t.Fatalf("k9 = %v with %d bytes, want completed with 5000", rec.State, len(rec.Response.Body))
	}
	checkBytes(t, s)
}

// MaxBytes refuses claims once the records take that much, and counts what each record holds
// exactly through claims, completions, takeovers, releases, sweeps and deletions.
func TestMaxBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const max = 100 << 10
	s, err := NewBounded(Options{MaxBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	body := bytes.Repeat([]byte("b"), 2000)
	stored := 0
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatalf("%d responses of %d bytes stored under MaxBytes %d", i, len(body), max)
		}
		key := fmt.Sprint("key-", i)
		fp := idem.Fingerprint([]byte(key))
		res, err := s.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour})
		if err != nil {
			if !errors.Is(err, ErrFull) || !errors.Is(err, idem.ErrStoreUnavailable) {
				t.Fatalf("Reserve(%s) = %v, want ErrFull", key, err)
			}
			break
		}
		if err := s.Complete(ctx, key, res.Record.Token, idem.Response{Status: 200, Body: body}, now, now.Add(time.Hour)); err != nil {
			t.Fatalf("Complete(%s): %v", key, err)
		}
		stored++
		checkBytes(t, s)
	}
	if b := s.Bytes(); b > max+int64(len(body))+1024 {
		t.Fatalf("Bytes = %d, more than MaxBytes %d plus one response", b, max)
	}
	if stored < 30 || stored > 60 {
		t.Fatalf("%d responses of 2000 bytes fit in %d bytes", stored, max)
	}
	for i := range stored {
		key := fmt.Sprint("key-", i)
		res, err := s.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: idem.Fingerprint([]byte(key)), Now: now, Lease: time.Second, TTL: time.Hour})
		if err != nil || res.Claimed || !bytes.Equal(res.Record.Response.Body, body) {
			t.Fatalf("replay of %s in a full store = %+v, %v", key, res, err)
		}
	}
	// Deleting and sweeping give the bytes back, to the last one.
	if err := s.Delete(ctx, "key-0"); err != nil {
		t.Fatal(err)
	}
	checkBytes(t, s)
	if _, err := s.Sweep(ctx, now.Add(2*time.Hour), 1<<20); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Fatalf("after a sweep of everything: Len %d, Bytes %d; want 0, 0", s.Len(), s.Bytes())
	}
}

// Many goroutines claiming distinct keys of a store bounded to max records: exactly max
// claims win, the others get ErrFull, and as the clock passes the records' expiry, the
// expired ones are reclaimed while the live ones stay. The count of bytes stays exact.
func TestBoundedConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const max, workers, perWorker = 200, 16, 100
	s, err := NewBounded(Options{MaxRecords: max, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_700_000_000, 0)
	for round := range 3 {
		now := start.Add(time.Duration(round) * time.Hour)
		var won, full atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for i := range perWorker {
					key := fmt.Sprintf("r%d-w%d-%d", round, w, i)
					res, err := s.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: idem.Fingerprint([]byte(key)), Now: now, Lease: time.Minute, TTL: 30 * time.Minute})
					switch {
					case errors.Is(err, ErrFull):
						full.Add(1)
						continue
					case err != nil || !res.Claimed:
						t.Errorf("Reserve(%s) = %+v, %v", key, res, err)
						return
					}
					won.Add(1)
					switch rng.IntN(3) {
					case 0:
						err = s.Complete(ctx, key, res.Record.Token, idem.Response{Status: 200, Body: make([]byte, rng.IntN(3000))}, now, now.Add(30*time.Minute))
					case 1:
						err = s.Extend(ctx, key, res.Record.Token, now.Add(2*time.Minute))
					}
					if err != nil {
						t.Errorf("on %s: %v", key, err)
					}
					if n := s.Len(); n > max {
						t.Errorf("Len = %d, past MaxRecords %d", n, max)
					}
				}
			}()
		}
		wg.Wait()
		// Each round starts after the last one's records expired: they are all reclaimed.
		if won.Load() != max || full.Load() != workers*perWorker-max {
			t.Fatalf("round %d: %d claims won and %d refused, want %d and %d", round, won.Load(), full.Load(), max, workers*perWorker-max)
		}
		checkBytes(t, s)
	}
}
