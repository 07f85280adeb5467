package sqlitestore

import (
	"hash/maphash"
	"sync/atomic"
)

// hint remembers, approximately, which keys this Store has seen existing, so that Reserve
// knows which look to take first (see Reserve). It is a direct-mapped table of key hashes:
// lock-free, allocation-free, fixed in size. It is only ever a hint: a wrong answer (a
// collision, an eviction, a key written by another process) costs time, never correctness,
// because the claim itself is always the atomic upsert.
type hint struct {
	seed  maphash.Seed
	slots []atomic.Uint64
}

func newHint(size int) *hint {
	if size <= 0 {
		return nil
	}
	return &hint{seed: maphash.MakeSeed(), slots: make([]atomic.Uint64, size)}
}

func (h *hint) hash(key string) uint64 { return maphash.String(h.seed, key) | 1 } // never 0, the empty slot

// has reports whether key was marked (or a key with the same slot and hash). A nil hint has
// every key, so that Reserve always looks first.
func (h *hint) has(key string) bool {
	if h == nil {
		return true
	}
	v := h.hash(key)
	return h.slots[v%uint64(len(h.slots))].Load() == v
}

// mark records that key exists.
func (h *hint) mark(key string) {
	if h == nil {
		return
	}
	v := h.hash(key)
	s := &h.slots[v%uint64(len(h.slots))]
	if s.Load() != v {
		s.Store(v)
	}
}
