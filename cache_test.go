package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func TestCache(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{CacheSize: 2, TTL: time.Hour})
	var runs atomic.Int32
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		if _, err := b.eng.Do(ctx, k, fp1, effect(&runs, 200, k)); err != nil {
			t.Fatal(err)
		}
		// The first replay reads the store and fills the cache.
		before := b.store.reserves.Load()
		if res, err := b.eng.Do(ctx, k, fp1, effect(&runs, 200, k)); err != nil || !res.Replayed || b.store.reserves.Load() != before+1 {
			t.Fatalf("first replay: %+v %v", res, err)
		}
	}
	before := b.store.reserves.Load()
	for range 5 {
		res, err := b.eng.Do(ctx, "a", fp1, effect(&runs, 200, "x"))
		if err != nil || !res.Replayed || string(res.Response.Body) != "a" {
			t.Fatalf("cached replay: %+v %v", res, err)
		}
	}
	if _, err := b.eng.Do(ctx, "a", fp2, effect(&runs, 200, "x")); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("cached mismatch: %v", err)
	}
	if got := b.store.reserves.Load(); got != before {
		t.Fatalf("cached replays reached the store %d times", got-before)
	}
	// A third key evicts the least recently used ("b"), which then comes from the store.
	_, _ = b.eng.Do(ctx, "c", fp1, effect(&runs, 200, "c"))
	_, _ = b.eng.Do(ctx, "c", fp1, effect(&runs, 200, "c"))
	before = b.store.reserves.Load()
	if res, _ := b.eng.Do(ctx, "b", fp1, effect(&runs, 200, "x")); !res.Replayed || b.store.reserves.Load() != before+1 {
		t.Fatalf("evicted key: replayed=%v store calls=%d", res.Replayed, b.store.reserves.Load()-before)
	}
	// Expired entries are not served.
	b.clock.Advance(time.Hour)
	if res, _ := b.eng.Do(ctx, "a", fp1, effect(&runs, 200, "new")); res.Replayed {
		t.Fatal("served an expired record from the cache")
	}
	// A record too large for the byte budget is not cached.
	big := setup(t, idem.Options{CacheSize: 10, CacheBytes: 8 << 10})
	_, _ = big.eng.Do(ctx, "big", fp1, effect(&runs, 200, strings.Repeat("x", 2<<10)))
	_, _ = big.eng.Do(ctx, "big", fp1, effect(&runs, 200, ""))
	before = big.store.reserves.Load()
	if res, _ := big.eng.Do(ctx, "big", fp1, effect(&runs, 200, "")); !res.Replayed || big.store.reserves.Load() != before+1 {
		t.Fatalf("oversized record served from the cache")
	}
	// In-progress records are never cached.
	hold := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_, _ = b.eng.Do(ctx, "p", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-hold
			return idem.Response{Status: 200}, nil
		})
	}()
	<-started
	before = b.store.reserves.Load()
	_, err := b.eng.Do(ctx, "p", fp1, effect(&runs, 200, ""))
	close(hold)
	if !errors.Is(err, idem.ErrInFlight) || b.store.reserves.Load() != before+1 {
		t.Fatalf("in-progress key: %v", err)
	}
}

func TestCacheBoundedByBytes(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{CacheSize: 100, CacheBytes: 16 << 10})
	ctx := context.Background()
	var runs atomic.Int32
	for i := range 20 { // ~1.1 KiB each: 22 KiB over a 16 KiB budget
		k := fmt.Sprintf("k%d", i)
		_, _ = b.eng.Do(ctx, k, fp1, effect(&runs, 200, strings.Repeat("x", 900)))
		_, _ = b.eng.Do(ctx, k, fp1, effect(&runs, 200, "")) // replayed from the store, then cached
	}
	before := b.store.reserves.Load()
	_, _ = b.eng.Do(ctx, "k19", fp1, effect(&runs, 200, ""))
	if b.store.reserves.Load() != before {
		t.Fatal("the most recent record is not cached")
	}
	_, _ = b.eng.Do(ctx, "k0", fp1, effect(&runs, 200, ""))
	if b.store.reserves.Load() != before+1 {
		t.Fatal("the oldest record was not evicted to keep within CacheBytes")
	}
}

// The cache never serves a record at or past its ExpiresAt (invariant 5): the key is absent
// then, and the effect runs again.
func TestCacheHonoursExpiresAt(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{CacheSize: 100, TTL: time.Hour})
	ctx := context.Background()
	var runs atomic.Int32
	first, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 201, "first"))
	if err != nil || !first.Kept {
		t.Fatalf("first: %+v, %v", first, err)
	}
	if res, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 201, "again")); err != nil || !res.Replayed {
		t.Fatalf("replay: %+v, %v", res, err) // fills the cache
	}
	b.clock.Advance(first.ExpiresAt.Sub(b.clock.Now()) - time.Microsecond)
	before := b.store.reserves.Load()
	if res, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 201, "again")); err != nil || !res.Replayed || b.store.reserves.Load() != before {
		t.Fatalf("just before ExpiresAt: %+v, %v; want a replay from the cache", res, err)
	}
	b.clock.Advance(time.Microsecond) // now == ExpiresAt: the record counts as absent
	res, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 201, "second"))
	if err != nil || res.Replayed || !res.Executed || runs.Load() != 2 {
		t.Fatalf("at ExpiresAt: %+v, %v, runs %d; want a new execution", res, err, runs.Load())
	}
}

// With CacheOnComplete, a result is cached as it is stored: the first duplicate is answered
// without a store call, a mismatch too, and only kept results are cached.
func TestCacheOnComplete(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{CacheSize: 8, TTL: time.Hour, CacheOnComplete: true})
	var runs atomic.Int32
	ctx := context.Background()
	first, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 201, "charged"))
	if err != nil || !first.Kept {
		t.Fatalf("first: %+v %v", first, err)
	}
	before := b.store.reserves.Load()
	for range 3 {
		res, err := b.eng.Do(ctx, "k", fp1, effect(&runs, 500, "again"))
		if err != nil || !res.Replayed || !res.Response.Equal(first.Response) || !res.ExpiresAt.Equal(first.ExpiresAt) {
			t.Fatalf("replay: %+v %v", res, err)
		}
	}
	if _, err := b.eng.Do(ctx, "k", fp2, effect(&runs, 200, "other")); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	if n := b.store.reserves.Load() - before; n != 0 {
		t.Fatalf("replays after the store reached it %d times, want 0", n)
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
	// A released outcome (5xx) is not cached: the retry reaches the store and runs.
	if _, err := b.eng.Do(ctx, "r", fp1, effect(&runs, 503, "busy")); err != nil {
		t.Fatal(err)
	}
	before = b.store.reserves.Load()
	if res, err := b.eng.Do(ctx, "r", fp1, effect(&runs, 200, "ok")); err != nil || res.Replayed || b.store.reserves.Load() != before+1 {
		t.Fatalf("after a release: %+v %v", res, err)
	}
	// The cached record expires with the stored one.
	b.clock.Advance(time.Hour)
	if res, _ := b.eng.Do(ctx, "k", fp1, effect(&runs, 200, "new")); res.Replayed {
		t.Fatal("served an expired record from the cache")
	}

	// Without the option the first duplicate still reads the store.
	plain := setup(t, idem.Options{CacheSize: 8, TTL: time.Hour})
	if _, err := plain.eng.Do(ctx, "k", fp1, effect(&runs, 201, "charged")); err != nil {
		t.Fatal(err)
	}
	before = plain.store.reserves.Load()
	if _, err := plain.eng.Do(ctx, "k", fp1, effect(&runs, 201, "charged")); err != nil || plain.store.reserves.Load() != before+1 {
		t.Fatalf("without CacheOnComplete the first replay made %d store calls, want 1", plain.store.reserves.Load()-before)
	}
}
