package idem

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

// These tests pin down properties that mutation testing showed no other test held: the
// memory the response cache accounts for, and the single exact allocation of EncodeResponse.

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

// EncodeResponse makes one allocation, of exactly the size it needs.
func TestEncodeResponseOneExactAllocation(t *testing.T) {
	r := Response{Status: 201, Body: []byte(strings.Repeat("x", 300)), Header: map[string][]string{
		"Content-Type": {"application/json"}, "Location": {"/a/" + strings.Repeat("1", 200)}, "Set-Cookie": {"a=1", "b=2"},
	}}
	b := EncodeResponse(r)
	if cap(b) != len(b) {
		t.Fatalf("EncodeResponse: len %d, cap %d: the size was not computed exactly", len(b), cap(b))
	}
	if n := testing.AllocsPerRun(20, func() { _ = EncodeResponse(r) }); n != 1 {
		t.Fatalf("EncodeResponse allocates %v times, want 1", n)
	}
}

// A response without headers, as a consumer's or any other non-HTTP effect stores, decodes
// with a nil Header and allocates nothing but its body: replays of such records cost no map.
func TestDecodeResponseWithoutHeaders(t *testing.T) {
	for _, r := range []Response{{}, {Status: 204}, {Body: []byte(`{"ok":true}`)}} {
		b := EncodeResponse(r)
		got, err := DecodeResponse(b)
		if err != nil || got.Header != nil || !got.Equal(r) {
			t.Fatalf("DecodeResponse(%+v) = %+v (Header nil: %t), %v", r, got, got.Header == nil, err)
		}
		want := 0.0
		if len(r.Body) > 0 {
			want = 1
		}
		if n := testing.AllocsPerRun(20, func() { _, _ = DecodeResponse(b) }); n != want {
			t.Fatalf("DecodeResponse(%+v) allocates %v times, want %v", r, n, want)
		}
	}
}

// Every three-digit status round-trips, and nothing above: a stored status is an HTTP status.
func TestCodecStatusRange(t *testing.T) {
	for _, s := range []int{100, 999} {
		got, err := DecodeResponse(EncodeResponse(Response{Status: s}))
		if err != nil || got.Status != s {
			t.Fatalf("status %d: decoded %+v, %v", s, got, err)
		}
	}
	if _, err := DecodeResponse(EncodeResponse(Response{Status: 1000})); !errors.Is(err, ErrCorruptRecord) {
		t.Fatalf("status 1000: %v, want ErrCorruptRecord", err)
	}
}

// uvarintLen agrees with binary.AppendUvarint at every length boundary.
func TestUvarintLen(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 1<<14 - 1, 1 << 14, 1<<21 - 1, 1 << 21, 1<<63 - 1, 1<<64 - 1} {
		if got, want := uvarintLen(v), len(binary.AppendUvarint(nil, v)); got != want {
			t.Errorf("uvarintLen(%d) = %d, want %d", v, got, want)
		}
	}
}

// The zero Options get the defaults their documentation states.
func TestOptionDefaults(t *testing.T) {
	e, err := New(nopStore{}, Options{CacheSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	o := e.opt
	if o.Lease != 30*time.Second || o.TTL != 24*time.Hour || o.Heartbeat != 10*time.Second ||
		o.PollInterval != 20*time.Millisecond || o.StoreTimeout != 10*time.Second || e.cache.maxBytes != 64<<20 {
		t.Fatalf("defaults: lease %s, TTL %s, heartbeat %s, poll %s, store timeout %s, cache bytes %d",
			o.Lease, o.TTL, o.Heartbeat, o.PollInterval, o.StoreTimeout, e.cache.maxBytes)
	}
}

// nopStore is a Store that New accepts; these tests never call it.
type nopStore struct{ Store }

// A new token is above the old one even when the clock is behind it, and follows the clock
// otherwise.
func TestNextToken(t *testing.T) {
	now := time.UnixMicro(1_000_000)
	if got := NextToken(5_000_000, now); got != 5_000_001 {
		t.Errorf("NextToken after 5000000 with the clock at 1000000 = %d, want 5000001", got)
	}
	if got := NextToken(10, now); got != 1_000_000 {
		t.Errorf("NextToken after 10 with the clock at 1000000 = %d, want 1000000", got)
	}
}

// A lease has run out at its LeaseUntil instant, not before; a completed record has no lease.
func TestLeaseExpired(t *testing.T) {
	until := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	r := Record{State: StateInProgress, LeaseUntil: until}
	if r.LeaseExpired(until.Add(-time.Nanosecond)) || !r.LeaseExpired(until) {
		t.Error("an in-progress lease must run out at its instant, not before")
	}
	r.State = StateCompleted
	if r.LeaseExpired(until.Add(time.Hour)) {
		t.Error("a completed record's lease expired")
	}
}
