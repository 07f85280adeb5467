// Package shardstest is the conformance suite of shards.Checkpoints implementations: leases
// held by one owner at a time, given up and taken over, checkpoints that never move back.
package shardstest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/consumer/internal/shards"
)

// Run runs the suite; newCheckpoints returns empty checkpoints of an application of their own.
func Run(t *testing.T, newCheckpoints func(t *testing.T) shards.Checkpoints) {
	ctx := context.Background()
	hour := func() time.Time { return time.Now().Add(time.Hour) }

	// One owner holds a live lease; only the holder saves; a checkpoint never moves back, and
	// sequence numbers compare as numbers (10 is past 9), ShardEnd past all.
	t.Run("LeaseAndSave", func(t *testing.T) {
		cps := newCheckpoints(t)
		if cp, held, err := cps.Claim(ctx, "s", "a", hour()); err != nil || !held || cp != "" {
			t.Fatalf("a claiming a free shard: %q %v %v", cp, held, err)
		}
		if _, held, err := cps.Claim(ctx, "s", "b", hour()); err != nil || held {
			t.Fatalf("b took a's live lease: %v %v", held, err)
		}
		if held, err := cps.Save(ctx, "s", "b", "5"); err != nil || held {
			t.Fatalf("b saved without the lease: %v %v", held, err)
		}
		for _, c := range []struct{ save, want string }{{"9", "9"}, {"10", "10"}, {"9", "10"}, {"10", "10"},
			{"49590000000000000000000000000000000000000010", "49590000000000000000000000000000000000000010"},
			{shards.ShardEnd, shards.ShardEnd}, {"99999999999999999999999999999999999999999", shards.ShardEnd}} {
			if held, err := cps.Save(ctx, "s", "a", c.save); err != nil || !held {
				t.Fatalf("a saving %s: %v %v", c.save, held, err)
			}
			if cp, err := cps.Checkpoint(ctx, "s"); err != nil || cp != c.want {
				t.Fatalf("after saving %s the checkpoint is %q (%v), want %s", c.save, cp, err, c.want)
			}
		}
		if cp, err := cps.Checkpoint(ctx, "never"); err != nil || cp != "" {
			t.Fatalf("checkpoint of a shard never read: %q %v", cp, err)
		}
	})

	// A lease runs out at its time; then another owner claims it, with its checkpoint, and the
	// former owner can no longer save.
	t.Run("LeaseRunsOut", func(t *testing.T) {
		cps := newCheckpoints(t)
		if _, held, _ := cps.Claim(ctx, "s", "a", time.Now().Add(300*time.Millisecond)); !held {
			t.Fatal("a did not get a free shard")
		}
		if held, err := cps.Save(ctx, "s", "a", "7"); err != nil || !held {
			t.Fatalf("a saving: %v %v", held, err)
		}
		if _, held, _ := cps.Claim(ctx, "s", "b", hour()); held {
			t.Fatal("b took a's lease before it ran out")
		}
		time.Sleep(400 * time.Millisecond)
		if cp, held, err := cps.Claim(ctx, "s", "b", hour()); err != nil || !held || cp != "7" {
			t.Fatalf("b after a's lease ran out: %q %v %v, want 7 held", cp, held, err)
		}
		if held, _ := cps.Save(ctx, "s", "a", "8"); held {
			t.Fatal("a saved after b took the shard over")
		}
	})

	// A claim until a time past gives the lease up: another owner claims it at once.
	t.Run("GiveUp", func(t *testing.T) {
		cps := newCheckpoints(t)
		cps.Claim(ctx, "s", "a", hour())
		cps.Save(ctx, "s", "a", "3")
		if _, held, err := cps.Claim(ctx, "s", "a", time.Time{}); err != nil || !held {
			t.Fatalf("a giving up its own lease: %v %v", held, err)
		}
		if cp, held, err := cps.Claim(ctx, "s", "b", hour()); err != nil || !held || cp != "3" {
			t.Fatalf("b right after a gave up: %q %v %v, want 3 held", cp, held, err)
		}
		// Giving up a lease one does not hold changes nothing.
		if _, held, _ := cps.Claim(ctx, "s", "a", time.Time{}); held {
			t.Fatal("a gave up b's lease")
		}
		if _, held, _ := cps.Claim(ctx, "s", "c", hour()); held {
			t.Fatal("c took b's live lease after a's give-up")
		}
	})

	// Take moves a lease from its holder to another owner, live or not, and only from the
	// holder named.
	t.Run("Take", func(t *testing.T) {
		cps := newCheckpoints(t)
		cps.Claim(ctx, "s", "a", hour())
		cps.Save(ctx, "s", "a", "4")
		if _, held, err := cps.Take(ctx, "s", "x", "b", hour()); err != nil || held {
			t.Fatalf("b took the shard from x, which does not hold it: %v %v", held, err)
		}
		if cp, held, err := cps.Take(ctx, "s", "a", "b", hour()); err != nil || !held || cp != "4" {
			t.Fatalf("b taking the shard from a: %q %v %v", cp, held, err)
		}
		if held, _ := cps.Save(ctx, "s", "a", "5"); held {
			t.Fatal("a saved after b took its shard")
		}
		if _, held, _ := cps.Claim(ctx, "s", "a", hour()); held {
			t.Fatal("a claimed back b's live lease")
		}
	})

	// Leases lists every shard with its checkpoint, owner and lease end.
	t.Run("Leases", func(t *testing.T) {
		cps := newCheckpoints(t)
		until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		for i := range 3 {
			id := fmt.Sprint("shard-", i)
			cps.Claim(ctx, id, fmt.Sprint("w", i), until)
			cps.Save(ctx, id, fmt.Sprint("w", i), fmt.Sprint(100+i))
		}
		ls, err := cps.Leases(ctx)
		if err != nil || len(ls) != 3 {
			t.Fatalf("Leases: %v %v, want 3", ls, err)
		}
		for _, l := range ls {
			var i int
			if _, err := fmt.Sscanf(l.Shard, "shard-%d", &i); err != nil {
				t.Fatalf("lease of an unknown shard: %+v", l)
			}
			if l.Owner != fmt.Sprint("w", i) || l.Checkpoint != fmt.Sprint(100+i) || !l.Until.Equal(until) || !l.Live(time.Now()) {
				t.Errorf("lease %+v, want owner w%d, checkpoint %d, until %v", l, i, 100+i, until)
			}
		}
	})

	// Many owners claiming one free shard at once: one holds it.
	t.Run("ConcurrentClaims", func(t *testing.T) {
		cps := newCheckpoints(t)
		for round := range 5 {
			id := fmt.Sprint("s", round)
			var holders atomic.Int32
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, held, err := cps.Claim(ctx, id, fmt.Sprint("o", g), hour())
					if err != nil {
						t.Error(err)
					}
					if held {
						holders.Add(1)
					}
				}()
			}
			wg.Wait()
			if n := holders.Load(); n != 1 {
				t.Fatalf("round %d: %d owners hold the shard, want 1", round, n)
			}
		}
	})
}
