package sqlitestore

import (
	"hash/maphash"
	"sync/atomic"
)

// hint remembers, approximately, which keys this Store has seen existing, so that Reserve
// knows which look to take first (see Reserve). It is a table of key hashes in pairs of
// slots, a key in either slot of its pair (so that two keys whose hashes pick the same pair
// do not keep evicting each other): lock-free, allocation-free, fixed in size. It is only
// ever a hint: a wrong answer (a collision, an eviction, a key written by another process,
// two marks at once that lose one) costs time, never correctness, because the claim itself
// is always the atomic upsert.
//
// For the keys it does not know, it learns which look pays: most of them are new keys on a
// store that has been serving, but after a restart, or with more live keys than slots, most
// of them exist, and claiming first would send every replay through the one writer.
type hint struct {
	seed  maphash.Seed
	slots []atomic.Uint64
	// lean counts, saturating at ±leanLimit, whether the unknown keys of the latest calls
	// existed (up) or were new (down). Above zero, unknown keys are read first too.
	lean atomic.Int32
}

// leanLimit bounds hint.lean: after a change of workload, that many calls with the other
// outcome turn the order back.
const leanLimit = 32

// newHint returns a hint of size slots (rounded up to a whole pair), or nil for size <= 0.
func newHint(size int) *hint {
	if size <= 0 {
		return nil
	}
	return &hint{seed: maphash.MakeSeed(), slots: make([]atomic.Uint64, size+size%2)}
}

// find returns key's hash, never 0 (the empty slot), and the two slots of its pair.
func (h *hint) find(key string) (v uint64, a, b *atomic.Uint64) {
	x := maphash.String(h.seed, key)
	i := x % uint64(len(h.slots)/2) * 2 // from the hash itself: v, always odd, would use half the pairs
	v = x | 1
	return v, &h.slots[i], &h.slots[i+1]
}

// has reports whether key was marked (or a key with the same pair and hash). A nil hint has
// every key, so that Reserve always looks first.
func (h *hint) has(key string) bool {
	if h == nil {
		return true
	}
	v, a, b := h.find(key)
	return a.Load() == v || b.Load() == v
}

// mark records that key exists. A key new to its pair takes the first slot and moves the key
// there to the second, evicting the older one: the pair keeps the two latest.
func (h *hint) mark(key string) {
	if h == nil {
		return
	}
	v, a, b := h.find(key)
	first := a.Load()
	if first == v || b.Load() == v {
		return
	}
	b.Store(first)
	a.Store(v)
}

// lookFirst reports whether a call for key should read the record before it claims: when
// key is known to exist, or when most unknown keys of late turned out to exist. known is
// has(key), which the caller passes to learn.
func (h *hint) lookFirst(key string) (look, known bool) {
	known = h.has(key)
	return known || h.lean.Load() > 0, known
}

// learn records whether a key that was not known (lookFirst's known false) existed.
func (h *hint) learn(existed bool) {
	if h == nil {
		return
	}
	step := int32(-1)
	if existed {
		step = 1
	}
	for {
		n := h.lean.Load()
		if n+step > leanLimit || n+step < -leanLimit || h.lean.CompareAndSwap(n, n+step) {
			return
		}
	}
}
