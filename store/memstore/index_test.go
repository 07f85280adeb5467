package memstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storetest"
)

// colliding returns a Store whose keys share their hash far more often than real ones do:
// with mask 0 every key is in one chain.
func colliding(mask uint32) *Store {
	s := New()
	s.mask = mask
	return s
}

func TestConformanceColliding(t *testing.T) {
	for _, mask := range []uint32{0, 3} {
		t.Run(fmt.Sprintf("mask=%d", mask), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) idem.Store { return colliding(mask) })
		})
	}
}

// The same random calls on stores whose keys collide and on one whose keys do not give the
// same answers: the chains of keys that share a hash, and the moves that keep the records
// dense, lose or mix up no record.
func TestCollisionsAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	stores := []*Store{New(), colliding(0), colliding(3), colliding(15)}
	now := time.Unix(1_700_000_000, 0)
	tokens := map[string]int64{}
	resp := idem.Response{Status: 201, Header: map[string][]string{"A": {"b"}}, Body: []byte("body")}
	key := func() string { return fmt.Sprintf("key-%d", rng.IntN(300)) }
	for step := range 20_000 {
		var got []any
		switch op := rng.IntN(10); {
		case op < 4:
			k, fp := key(), fmt.Sprint(rng.IntN(2))
			lease, window := time.Duration(1+rng.IntN(5))*time.Second, time.Duration(1+rng.IntN(60))*time.Second
			for _, s := range stores {
				res, err := s.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: lease, TTL: window})
				got = append(got, res, err)
				if res.Claimed {
					tokens[k] = res.Record.Token
				}
			}
		case op < 6:
			k := key()
			for _, s := range stores {
				got = append(got, s.Complete(ctx, k, tokens[k], resp, now, now.Add(30*time.Second)))
			}
		case op < 7:
			k := key()
			for _, s := range stores {
				got = append(got, s.Release(ctx, k, tokens[k]))
			}
		case op < 8:
			k := key()
			for _, s := range stores {
				got = append(got, s.Delete(ctx, k))
			}
		case op < 9:
			batch := 1 + rng.IntN(20)
			for _, s := range stores {
				n, err := s.Sweep(ctx, now, batch)
				got = append(got, n, err)
			}
		default:
			now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		}
		for i := 0; i < len(got); i += len(got) / len(stores) {
			if !reflect.DeepEqual(got[i:i+len(got)/len(stores)], got[:len(got)/len(stores)]) {
				t.Fatalf("step %d: store %d answered %v, the store without collisions %v", step, i/(len(got)/len(stores)), got[i:i+len(got)/len(stores)], got[:len(got)/len(stores)])
			}
		}
		if step%200 != 0 {
			continue
		}
		for j := range 300 {
			k := fmt.Sprintf("key-%d", j)
			want, wantErr := stores[0].Get(ctx, k)
			for _, s := range stores[1:] {
				rec, err := s.Get(ctx, k)
				if !errors.Is(err, wantErr) || !reflect.DeepEqual(rec, want) {
					t.Fatalf("step %d: Get(%q) = %+v, %v on a colliding store, want %+v, %v", step, k, rec, err, want, wantErr)
				}
			}
		}
	}
}

// After a sweep of every record, the pages are given back but one.
func TestSweepGivesPagesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New()
	now := time.Now()
	for i := range 10 * pageSize {
		if _, err := s.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprint(i), Fingerprint: "fp", Now: now, Lease: time.Second, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.Sweep(ctx, now.Add(time.Hour), 100*pageSize); n != 10*pageSize || err != nil {
		t.Fatalf("Sweep = %d, %v", n, err)
	}
	if s.Len() != 0 || len(s.index) != 0 || len(s.heads) > 1 || len(s.blobs) > 1 {
		t.Fatalf("after the sweep: %d records, %d in the index, %d and %d pages", s.Len(), len(s.index), len(s.heads), len(s.blobs))
	}
	// The store is still usable.
	if res, err := s.Reserve(ctx, idem.ReserveRequest{Key: "again", Fingerprint: "fp", Now: now, Lease: time.Second, TTL: time.Minute}); err != nil || !res.Claimed {
		t.Fatalf("Reserve after the sweep = %+v, %v", res, err)
	}
}
