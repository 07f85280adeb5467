package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

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
