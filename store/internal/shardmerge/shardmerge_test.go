package shardmerge_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/idemkit/idem/store/internal/shardmerge"
)

// Shards read a few keys at a time, some chunks empty while more remain, merge into every key
// once, in order, whatever the chunk sizes; and a merge asked for fewer keys reads no further
// than it needs.
func TestRunMergesInOrder(t *testing.T) {
	for _, desc := range []bool{false, true} {
		runMerges(t, desc)
	}
}

// runMerges is TestRunMergesInOrder in one order: ascending, or descending (NewDescending).
func runMerges(t *testing.T, desc bool) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		nShards := 1 + rng.IntN(8)
		ranges := make([][]string, nShards)
		var all []string
		for i := range 300 {
			k := fmt.Sprintf("k%05d", i)
			sh := rng.IntN(nShards)
			ranges[sh] = append(ranges[sh], k)
			all = append(all, k)
		}
		if desc {
			slices.Reverse(all)
			for _, r := range ranges {
				slices.Reverse(r)
			}
		}
		want := rng.IntN(len(all) + 20)
		pos := make([]int, nShards)
		m := shardmerge.New(nShards)
		if desc {
			m = shardmerge.NewDescending(nShards)
		}
		var got []string
		read := func(_ context.Context, shards []int) error {
			for _, sh := range shards {
				n := rng.IntN(5) // 0: an empty chunk, as a page of other items
				end := min(pos[sh]+n, len(ranges[sh]))
				m.Add(sh, ranges[sh][pos[sh]:end], end < len(ranges[sh]))
				pos[sh] = end
			}
			return nil
		}
		check := func(_ context.Context, keys []string) error {
			got = append(got, keys...)
			return nil
		}
		if err := m.Run(context.Background(), func() int { return want - len(got) }, read, check); err != nil {
			t.Fatal(err)
		}
		if exp := all[:min(want, len(all))]; !slices.Equal(got, exp) {
			t.Fatalf("descending %t, seed %d, %d shards, want %d keys: got %d keys %v…", desc, seed, nShards, want, len(got), got[:min(len(got), 10)])
		}
	}
}

// A shard whose keys in hand ran out, with more to read, blocks the merge: its next key might
// come before any other shard's.
func TestNextWaitsForBlockedShard(t *testing.T) {
	m := shardmerge.New(2)
	m.Add(0, []string{"a"}, true)
	m.Add(1, []string{"b", "c"}, false)
	if k, ok := m.Next(); !ok || k != "a" {
		t.Fatalf("Next = %q, %t", k, ok)
	}
	if k, ok := m.Next(); ok {
		t.Fatalf("Next handed out %q while shard 0 has more to read", k)
	}
	if b := m.Blocked(); !slices.Equal(b, []int{0}) {
		t.Fatalf("Blocked = %v", b)
	}
	m.Add(0, []string{"ab"}, false)
	for _, want := range []string{"ab", "b", "c"} {
		if k, ok := m.Next(); !ok || k != want {
			t.Fatalf("Next = %q, %t; want %q", k, ok, want)
		}
	}
	if _, ok := m.Next(); ok || len(m.Blocked()) != 0 {
		t.Fatal("the merge does not end")
	}
}
