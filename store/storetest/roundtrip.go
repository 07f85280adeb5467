package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func (s suite) roundTrip(t *testing.T, b *bundle) {
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	big[0], big[len(big)-1], big[len(big)/2] = 0, 0, 0
	long := strings.Repeat("é", 127) + "k" // 255 bytes of UTF-8
	cases := []struct {
		name string
		key  string
		resp idem.Response
	}{
		{"empty body", "empty", idem.Response{Status: 204}},
		{"no status", "nostatus", idem.Response{Body: []byte("consumer result")}},
		{"binary 1MiB", "binary", idem.Response{Status: 200, Body: big, Header: map[string][]string{"Content-Type": {"application/octet-stream"}}}},
		{"multi headers", "headers", idem.Response{Status: 201, Header: map[string][]string{
			"Set-Cookie": {"b=2", "a=1", "a=1"}, "X-Empty": {""}, "Link": {"<x>; rel=next"},
		}, Body: []byte("ok")}},
		{"omitted body", "omitted", idem.Response{Status: 200, BodyOmitted: true, Header: map[string][]string{"X-A": {"1"}}}},
		{"255-byte utf-8 key", long, idem.Response{Status: 200, Body: []byte("unicode ✓")}},
		{"odd key", "k\t\"'\\%_*?/\u00a0∑😀", idem.Response{Status: 202}},
	}
	c := ctx(t)
	for _, tc := range cases {
		k := b.key(tc.key)
		claim := mustClaim(t, b.store, k, fpA, b.base)
		if err := b.store.Complete(c, k, claim.Token, tc.resp, b.base, b.base.Add(ttl)); err != nil {
			t.Fatalf("%s: Complete: %v", tc.name, err)
		}
		for _, get := range []func() idem.Record{
			func() idem.Record { return mustGet(t, b.store, k) },
			func() idem.Record { return mustReserve(t, b.store, k, fpA, b.base.Add(time.Second)).Record },
		} {
			rec := get()
			if rec.Key != k || rec.Response == nil {
				t.Fatalf("%s: record %+v", tc.name, rec)
			}
			if !rec.Response.Equal(tc.resp) {
				t.Errorf("%s: response did not round-trip:\n got %+v\nwant %+v", tc.name, abbreviate(*rec.Response), abbreviate(tc.resp))
			}
		}
	}
}

func abbreviate(r idem.Response) idem.Response {
	if len(r.Body) > 64 {
		r.Body = append(r.Body[:32:32], []byte("…")...)
	}
	return r
}

func (s suite) getMissing(t *testing.T, b *bundle) {
	if _, err := b.store.Get(ctx(t), b.key("missing")); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Get of missing key: %v, want ErrNotFound", err)
	}
}

// invalidKeys: every store refuses the keys idem.CheckKey refuses, with idem.ErrInvalidInput
// and without touching a record, and accepts the longest valid one.
func (s suite) invalidKeys(t *testing.T, b *bundle) {
	c := ctx(t)
	for name, key := range map[string]string{
		"empty":      "",
		"too long":   b.key(strings.Repeat("k", idem.MaxStorageKeyLen)),
		"not UTF-8":  b.key("k\xff"),
		"with a NUL": b.key("k\x00"),
	} {
		if res, err := b.store.Reserve(c, idem.ReserveRequest{Key: key, Fingerprint: fpA, Now: b.base, Lease: lease, TTL: ttl}); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("Reserve of a key %s = %+v, %v; want idem.ErrInvalidInput", name, res, err)
		}
	}
	longest := b.key(strings.Repeat("k", idem.MaxStorageKeyLen-len(b.key(""))))
	if res := mustReserve(t, b.store, longest, fpA, b.base); !res.Claimed {
		t.Fatalf("Reserve of a %d-byte key did not claim: %+v", len(longest), res)
	}
}
