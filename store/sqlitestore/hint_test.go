package sqlitestore

import (
	"strconv"
	"sync"
	"testing"
)

// TestHintLean: a hint reads unknown keys first once most of them turned out to exist, turns
// back once most are new again, and does so within leanLimit calls whatever came before.
func TestHintLean(t *testing.T) {
	h := newHint(1024)
	if look, known := h.lookFirst("new"); look || known {
		t.Fatalf("fresh hint: lookFirst = %v, %v; want false, false (claim first)", look, known)
	}
	for range 10_000 {
		h.learn(true)
	}
	if got := h.lean.Load(); got != leanLimit {
		t.Fatalf("lean after many existing keys = %d, want it held at %d", got, leanLimit)
	}
	if look, known := h.lookFirst("unknown"); !look || known {
		t.Fatalf("after existing keys: lookFirst = %v, %v; want true, false", look, known)
	}
	for range leanLimit {
		h.learn(false)
	}
	if look, _ := h.lookFirst("unknown"); look {
		t.Fatalf("after %d new keys: still looks first", leanLimit)
	}
	for range 10_000 {
		h.learn(false)
	}
	if got := h.lean.Load(); got != -leanLimit {
		t.Fatalf("lean after many new keys = %d, want it held at %d", got, -leanLimit)
	}
	h.mark("seen")
	if look, known := h.lookFirst("seen"); !look || !known {
		t.Fatalf("a marked key: lookFirst = %v, %v; want true, true", look, known)
	}
	var nilHint *hint
	nilHint.learn(true)
	if look, known := nilHint.lookFirst("any"); !look || !known {
		t.Fatalf("no hint: lookFirst = %v, %v; want true, true (always look)", look, known)
	}
}

// TestHintLeanConcurrent: learning from many goroutines at once keeps lean within its bounds.
func TestHintLeanConcurrent(t *testing.T) {
	h := newHint(64)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				h.learn((g+i)%3 != 0)
				h.lookFirst(strconv.Itoa(i))
				if n := h.lean.Load(); n > leanLimit || n < -leanLimit {
					t.Errorf("lean %d out of ±%d", n, leanLimit)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestHintPairs: two keys that share a pair of slots are both remembered; a third evicts the
// older of them; marking a key already there changes nothing.
func TestHintPairs(t *testing.T) {
	h := newHint(1) // rounded up to one pair: every key shares it
	if len(h.slots) != 2 {
		t.Fatalf("newHint(1) has %d slots, want 2", len(h.slots))
	}
	h.mark("a")
	h.mark("b")
	h.mark("b")
	if !h.has("a") || !h.has("b") || h.has("c") {
		t.Fatalf("after a, b: has a %v, b %v, c %v; want true, true, false", h.has("a"), h.has("b"), h.has("c"))
	}
	h.mark("c")
	if h.has("a") || !h.has("b") || !h.has("c") {
		t.Fatalf("after a, b, c: has a %v, b %v, c %v; want false, true, true", h.has("a"), h.has("b"), h.has("c"))
	}
	if newHint(0) != nil || newHint(-1) != nil {
		t.Fatal("a hint of no slots is not nil")
	}
}

// TestHintKeepsAWorkingSet: of 10,000 keys marked into 65,536 slots, about 1% are forgotten
// (three or more keys in one pair), where a table of one slot per key would lose those whose
// hashes collide, about 7%.
func TestHintKeepsAWorkingSet(t *testing.T) {
	h := newHint(1 << 16)
	const n = 10_000
	for i := range n {
		h.mark(strconv.Itoa(i))
	}
	lost := 0
	for i := range n {
		if !h.has(strconv.Itoa(i)) {
			lost++
		}
	}
	t.Logf("%d of %d keys forgotten", lost, n)
	if lost > n/50 {
		t.Fatalf("%d of %d keys forgotten, want at most 2%%", lost, n)
	}
}
