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
