package shards

import (
	"context"
	"testing"
	"time"
)

// Sequence numbers compare as numbers, not as strings; ShardEnd is past all; "" is before all.
func TestLater(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"10", "9", true}, {"9", "10", false}, {"49590000000000000000000000000000000000000010", "49590000000000000000000000000000000000000009", true},
		{ShardEnd, "99", true}, {"99", ShardEnd, false}, {"1", "", true}, {"", "1", false}, {"5", "5", false}, {ShardEnd, ShardEnd, false},
	} {
		if got := Later(c.a, c.b); got != c.want {
			t.Errorf("Later(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// One owner holds a shard's lease until it runs out; a checkpoint is saved only by the holder
// and never moves back.
func TestMemoryCheckpoints(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	m := NewMemoryCheckpoints()
	m.now = func() time.Time { return now }
	if _, held, _ := m.Claim(ctx, "s", "a", now.Add(time.Second)); !held {
		t.Fatal("a did not get a free shard")
	}
	if _, held, _ := m.Claim(ctx, "s", "b", now.Add(time.Second)); held {
		t.Fatal("b took a's live lease")
	}
	if held, _ := m.Save(ctx, "s", "b", "5"); held {
		t.Fatal("b saved a checkpoint without the lease")
	}
	for _, cp := range []string{"10", "9"} {
		if held, _ := m.Save(ctx, "s", "a", cp); !held {
			t.Fatal("a lost its lease")
		}
	}
	if cp, _ := m.Checkpoint(ctx, "s"); cp != "10" {
		t.Fatalf("checkpoint %q, want 10: it must never move back", cp)
	}
	now = now.Add(2 * time.Second)
	if cp, held, _ := m.Claim(ctx, "s", "b", now.Add(time.Second)); !held || cp != "10" {
		t.Fatalf("after a's lease ran out, b got %v with checkpoint %q", held, cp)
	}
	if held, _ := m.Save(ctx, "s", "a", "11"); held {
		t.Fatal("a saved after its lease was taken over")
	}
}
