package idem

import (
	"container/list"
	"sync"
	"time"
)

// lru is a bounded cache of completed records. A completed record does not change until it
// expires, so serving it locally is as good as reading it from the store.
type lru struct {
	mu    sync.Mutex
	max   int
	order *list.List // front: most recently used; values are *Record
	byKey map[string]*list.Element
}

func newLRU(max int) *lru {
	return &lru{max: max, order: list.New(), byKey: make(map[string]*list.Element, max)}
}

// get returns the record for key if it is cached and not expired at now.
func (c *lru) get(key string, now time.Time) (Record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return Record{}, false
	}
	rec := el.Value.(*Record)
	if rec.Expired(now) {
		c.order.Remove(el)
		delete(c.byKey, key)
		return Record{}, false
	}
	c.order.MoveToFront(el)
	return *rec, true
}

// put caches a completed record.
func (c *lru) put(rec Record) {
	if rec.State != StateCompleted {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[rec.Key]; ok {
		*el.Value.(*Record) = rec
		c.order.MoveToFront(el)
		return
	}
	c.byKey[rec.Key] = c.order.PushFront(&rec)
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byKey, last.Value.(*Record).Key)
	}
}
