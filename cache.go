package idem

import (
	"container/list"
	"sync"
	"time"
)

// lru is a bounded cache of completed records. A completed record does not change until it
// expires, so serving it locally is as good as reading it from the store.
type lru struct {
	mu       sync.Mutex
	max      int
	maxBytes int64
	bytes    int64
	order    *list.List // front: most recently used; values are *Record
	byKey    map[string]*list.Element
}

func newLRU(max int, maxBytes int64) *lru {
	return &lru{max: max, maxBytes: maxBytes, order: list.New(), byKey: make(map[string]*list.Element)}
}

// size approximates the memory a cached record holds.
func size(rec *Record) int64 {
	n := int64(len(rec.Key) + len(rec.Fingerprint) + 128)
	if r := rec.Response; r != nil {
		n += int64(len(r.Body))
		for k, vs := range r.Header {
			n += int64(len(k) + 16)
			for _, v := range vs {
				n += int64(len(v) + 16)
			}
		}
	}
	return n
}

// get returns the record for key if it is cached and not expired at now(). The clock is read
// only on a hit: a miss (every new key) costs no clock read.
func (c *lru) get(key string, now func() time.Time) (Record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return Record{}, false
	}
	rec := el.Value.(*Record)
	if rec.Expired(now()) {
		c.order.Remove(el)
		delete(c.byKey, key)
		c.bytes -= size(rec)
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
	n := size(&rec)
	if n > c.maxBytes/8 {
		return // one record never takes more than an eighth of the budget
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[rec.Key]; ok {
		old := el.Value.(*Record)
		c.bytes += n - size(old)
		*old = rec
		c.order.MoveToFront(el)
	} else {
		c.byKey[rec.Key] = c.order.PushFront(&rec)
		c.bytes += n
	}
	for c.order.Len() > c.max || c.bytes > c.maxBytes {
		last := c.order.Back()
		r := last.Value.(*Record)
		c.order.Remove(last)
		delete(c.byKey, r.Key)
		c.bytes -= size(r)
	}
}
