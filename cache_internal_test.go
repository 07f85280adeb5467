package idem

import (
	"strings"
	"testing"
)

// A cached record's accounted size grows with each part of it that takes memory: the key, the
// fingerprint, the body, header names and header values.
func TestCacheSizeCountsEveryPart(t *testing.T) {
	base := Record{Key: "k", Fingerprint: "f", State: StateCompleted,
		Response: &Response{Status: 201, Header: map[string][]string{"A": {"v"}}, Body: []byte("b")}}
	grow := map[string]func(r *Record){
		"key":          func(r *Record) { r.Key += strings.Repeat("k", 100) },
		"fingerprint":  func(r *Record) { r.Fingerprint += strings.Repeat("f", 100) },
		"body":         func(r *Record) { r.Response.Body = append(r.Response.Body, strings.Repeat("b", 100)...) },
		"header name":  func(r *Record) { r.Response.Header = map[string][]string{"A" + strings.Repeat("a", 100): {"v"}} },
		"header value": func(r *Record) { r.Response.Header = map[string][]string{"A": {"v" + strings.Repeat("v", 100)}} },
		"another header": func(r *Record) {
			r.Response.Header = map[string][]string{"A": {"v"}, "B": {}}
		},
		"another value": func(r *Record) { r.Response.Header = map[string][]string{"A": {"v", ""}} },
	}
	for name, g := range grow {
		r := base
		resp := *base.Response
		r.Response = &resp
		g(&r)
		if size(&r) <= size(&base) {
			t.Errorf("a record with a larger %s is accounted %d bytes, not more than %d", name, size(&r), size(&base))
		}
	}
	if size(&base) < int64(len(base.Key)+len(base.Fingerprint)+len(base.Response.Body)) {
		t.Errorf("size %d is less than the bytes the record holds", size(&base))
	}
}

// The cache keeps records up to its byte budget exactly, and evicts the least recently used
// one beyond it.
func TestCacheKeepsExactlyItsBudget(t *testing.T) {
	rec := func(k string) Record {
		return Record{Key: k, Fingerprint: "f", State: StateCompleted, Response: &Response{Status: 200, Body: []byte("body")}}
	}
	one := rec("k0")
	s := size(&one)
	c := newLRU(100, 8*s)
	for i := range 8 {
		c.put(rec("k" + string(rune('0'+i))))
	}
	if c.order.Len() != 8 || c.bytes != 8*s {
		t.Fatalf("8 records of %d bytes in a budget of %d: kept %d (%d bytes), want all 8", s, 8*s, c.order.Len(), c.bytes)
	}
	c.put(rec("k8"))
	if c.order.Len() != 8 || c.bytes != 8*s {
		t.Fatalf("a ninth record: kept %d (%d bytes), want 8", c.order.Len(), c.bytes)
	}
	if _, ok := c.byKey["k0"]; ok {
		t.Fatal("the least recently used record was kept past the budget")
	}
}

// Putting a key already cached replaces its record and its accounted size.
func TestCacheReplaceAccountsTheNewSize(t *testing.T) {
	small := Record{Key: "k", State: StateCompleted, Response: &Response{Status: 200, Body: []byte("s")}}
	large := Record{Key: "k", State: StateCompleted, Response: &Response{Status: 200, Body: []byte(strings.Repeat("l", 500))}}
	c := newLRU(10, 1<<20)
	c.put(small)
	c.put(large)
	if c.order.Len() != 1 || c.bytes != size(&large) {
		t.Fatalf("after replacing: %d records, %d bytes; want 1 record of %d bytes", c.order.Len(), c.bytes, size(&large))
	}
	c.put(small)
	if c.bytes != size(&small) {
		t.Fatalf("after replacing back: %d bytes, want %d", c.bytes, size(&small))
	}
}
