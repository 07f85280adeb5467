// Package shardmerge merges, in key order (or in descending order: NewDescending), the sorted
// key ranges of a store's shards when each
// range is read a chunk at a time: redisstore's and dynamostore's listings (one index range
// per shard) share it. The merge never hands out a key while a shard whose keys in hand ran
// out still has more to read: that shard's next key might come first. A Page keeps, of the
// records of the keys handed out, those a listing's page takes.
package shardmerge

import (
	"container/heap"
	"context"
)

// Merge is one k-way merge. Feed it each shard's chunks with Add; take keys with Next.
type Merge struct {
	keys    [][]string // per shard: read and not yet handed out, in key order
	more    []bool     // per shard: its range has keys after those read
	heap    heads      // the shards with keys in hand, by their next key
	blocked []int      // shards whose keys in hand ran out but whose range has more
}

// New returns a merge of n shards, none read yet, in ascending byte order.
func New(n int) *Merge {
	return &Merge{keys: make([][]string, n), more: make([]bool, n)}
}

// NewDescending returns a merge of n shards, none read yet, in descending byte order: each
// shard's chunks come largest first, and Next hands out the largest key in hand. Newest-first
// listings merge index members that sort by creation time this way.
func NewDescending(n int) *Merge {
	m := New(n)
	m.heap.desc = true
	return m
}

// Add hands over the next keys of shard sh's range, in key order, and whether the range has
// more after them. A chunk may be empty while more remain (a page of other items only).
func (m *Merge) Add(sh int, keys []string, more bool) {
	m.keys[sh], m.more[sh] = keys, more
	switch {
	case len(keys) > 0:
		heap.Push(&m.heap, head{key: keys[0], shard: sh})
	case more:
		m.blocked = append(m.blocked, sh)
	}
}

// Next returns the smallest key in hand (the largest, descending), or false when none can be handed out before the
// blocked shards are read (or when every range is merged: then Blocked is empty).
func (m *Merge) Next() (string, bool) {
	if len(m.blocked) > 0 || m.heap.Len() == 0 {
		return "", false
	}
	h := heap.Pop(&m.heap).(head)
	rest := m.keys[h.shard][1:]
	m.keys[h.shard] = rest
	switch {
	case len(rest) > 0:
		heap.Push(&m.heap, head{key: rest[0], shard: h.shard})
	case m.more[h.shard]:
		m.blocked = append(m.blocked, h.shard)
	}
	return h.key, true
}

// Blocked returns the shards to read before the merge can go on, and forgets them (Add them
// again with their next chunks). It is empty once every range is merged.
func (m *Merge) Blocked() []int {
	b := m.blocked
	m.blocked = nil
	return b
}

// Run merges until enough keys are kept: read reads the next chunk of each given shard and
// Adds it; check looks at a batch of keys in key order and keeps those that match; need says
// how many more keys the caller wants kept (≤ 0: enough). It starts by reading every shard.
func (m *Merge) Run(ctx context.Context, need func() int, read func(ctx context.Context, shards []int) error, check func(ctx context.Context, keys []string) error) error {
	all := make([]int, len(m.keys))
	for i := range all {
		all[i] = i
	}
	if err := read(ctx, all); err != nil {
		return err
	}
	for need() > 0 {
		var batch []string
		for len(batch) < need() {
			k, ok := m.Next()
			if !ok {
				break
			}
			batch = append(batch, k)
		}
		if len(batch) > 0 {
			if err := check(ctx, batch); err != nil {
				return err
			}
			continue
		}
		blocked := m.Blocked()
		if len(blocked) == 0 {
			return nil // every range is read to its end
		}
		if err := read(ctx, blocked); err != nil {
			return err
		}
	}
	return nil
}

// head is a shard in the heap, with its smallest key in hand.
type head struct {
	key   string
	shard int
}

// heads is the heap of shards by their next key, smallest first (largest first when desc).
type heads struct {
	h    []head
	desc bool
}

func (h *heads) Len() int { return len(h.h) }
func (h *heads) Less(i, j int) bool {
	if h.desc {
		return h.h[i].key > h.h[j].key
	}
	return h.h[i].key < h.h[j].key
}
func (h *heads) Swap(i, j int) { h.h[i], h.h[j] = h.h[j], h.h[i] }
func (h *heads) Push(x any)    { h.h = append(h.h, x.(head)) }
func (h *heads) Pop() any {
	x := h.h[len(h.h)-1]
	h.h = h.h[:len(h.h)-1]
	return x
}
