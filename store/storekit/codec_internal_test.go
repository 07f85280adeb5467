package storekit

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

// EncodeResponse makes one allocation, of exactly the size it needs.
func TestEncodeResponseOneExactAllocation(t *testing.T) {
	r := idem.Response{Status: 201, Body: []byte(strings.Repeat("x", 300)), Header: map[string][]string{
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
	for _, r := range []idem.Response{{}, {Status: 204}, {Body: []byte(`{"ok":true}`)}} {
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
		got, err := DecodeResponse(EncodeResponse(idem.Response{Status: s}))
		if err != nil || got.Status != s {
			t.Fatalf("status %d: decoded %+v, %v", s, got, err)
		}
	}
	if _, err := DecodeResponse(EncodeResponse(idem.Response{Status: 1000})); !errors.Is(err, idem.ErrCorruptRecord) {
		t.Fatalf("status 1000: %v, want idem.ErrCorruptRecord", err)
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
