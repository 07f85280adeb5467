package storekit_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

func TestResponseCodecRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []idem.Response{
		{},
		{Status: 200},
		{Status: 201, Body: []byte{0, 1, 2, 0}},
		{Status: 204, Header: map[string][]string{"A": {"1", "2"}, "B": {""}, "C": {}}},
		{Status: 200, BodyOmitted: true, Header: map[string][]string{"Content-Type": {"text/plain"}}},
		{Status: 999, Body: bytes.Repeat([]byte("x"), 1<<16)},
	}
	for _, r := range cases {
		b := storekit.EncodeResponse(r)
		got, err := storekit.DecodeResponse(b)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if !got.Equal(r) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
		}
		if !bytes.Equal(storekit.EncodeResponse(got), b) {
			t.Fatal("encoding is not stable")
		}
	}
}

// A stored version-1 response, as written by the first release: later releases must read it.
func TestResponseCodecReadsVersion1(t *testing.T) {
	t.Parallel()
	v1 := []byte("\x01\x00\xc9\x01\x01\x0cContent-Type\x01\x10application/json{\"id\":1}")
	got, err := storekit.DecodeResponse(v1)
	if err != nil {
		t.Fatal(err)
	}
	want := idem.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":1}`)}
	if !got.Equal(want) {
		t.Fatalf("got %+v", got)
	}
}

func TestResponseCodecRejectsCorruption(t *testing.T) {
	t.Parallel()
	for _, b := range [][]byte{
		nil, {1}, {2, 0}, {1, 2}, {1, 0, 0xff}, {1, 0, 0xc8, 0x01, 5, 'a'}, {1, 0, 0xe8, 0x07},
		[]byte("\x01\x00\x01\x02\x01a\x00\x01a\x00"), // duplicate header name
	} {
		if _, err := storekit.DecodeResponse(b); !errors.Is(err, idem.ErrCorruptRecord) || !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%q: err = %v, want ErrCorruptRecord", b, err)
		}
	}
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add(storekit.EncodeResponse(idem.Response{Status: 200, Header: map[string][]string{"A": {"b"}}, Body: []byte("x")}))
	f.Add([]byte{1, 1, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := storekit.DecodeResponse(b)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode to something that decodes to the same response.
		r2, err := storekit.DecodeResponse(storekit.EncodeResponse(r))
		if err != nil || !r2.Equal(r) {
			t.Fatalf("re-decode: %v %+v vs %+v", err, r2, r)
		}
	})
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	a := idem.Fingerprint([]byte("ab"), []byte("c"))
	if b := idem.Fingerprint([]byte("a"), []byte("bc")); a == b {
		t.Fatal("different splits give the same fingerprint")
	}
	if !idem.ValidFingerprint(a) || a != idem.Fingerprint([]byte("ab"), []byte("c")) {
		t.Fatal("fingerprint not valid or not stable")
	}
	if idem.Fingerprint() == idem.Fingerprint(nil) {
		t.Fatal("no parts and one empty part must differ")
	}
}

// EncodeResponse writes exactly the version-1 layout, header names in sorted order, whatever
// the number of headers and the lengths (one-byte and longer varints).
func TestEncodeResponseLayout(t *testing.T) {
	t.Parallel()
	golden := idem.Response{Status: 201, Header: map[string][]string{"B": {"2"}, "A": {"1", "x"}}, Body: []byte("hi")}
	if got, want := storekit.EncodeResponse(golden), []byte("\x01\x00\xc9\x01\x02\x01A\x02\x011\x01x\x01B\x01\x012hi"); !bytes.Equal(got, want) {
		t.Fatalf("EncodeResponse = %q, want %q", got, want)
	}
	for n := range 40 {
		h := map[string][]string{}
		for i := range n {
			name := strings.Repeat(string(rune('a'+i%26)), 1+i*7)
			vals := []string{}
			for j := range i % 4 {
				vals = append(vals, strings.Repeat("v", j*60))
			}
			h[name] = vals
		}
		r := idem.Response{Status: 100 + n*20, Header: h, Body: bytes.Repeat([]byte{7}, n*13), BodyOmitted: n%2 == 1}
		got := storekit.EncodeResponse(r)
		if want := referenceEncoding(r); !bytes.Equal(got, want) {
			t.Fatalf("%d headers: EncodeResponse = %q, want %q", n, got, want)
		}
	}
}

// referenceEncoding is the version-1 layout written the plain way.
func referenceEncoding(r idem.Response) []byte {
	b := []byte{1, 0}
	if r.BodyOmitted {
		b[1] = 1
	}
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = binary.AppendUvarint(b, uint64(len(r.Header)))
	for _, k := range slices.Sorted(maps.Keys(r.Header)) {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(r.Header[k])))
		for _, v := range r.Header[k] {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, r.Body...)
}

// ValidFingerprint accepts exactly 64 lowercase hex digits: every byte value is tried at every
// position of a valid fingerprint.
func TestValidFingerprintEveryByte(t *testing.T) {
	t.Parallel()
	fp := idem.Fingerprint([]byte("x"))
	for _, n := range []int{0, 1, 63, 65, 128} {
		if idem.ValidFingerprint(strings.Repeat("a", n)) {
			t.Errorf("length %d accepted", n)
		}
	}
	b := []byte(fp)
	for i := range b {
		for c := range 256 {
			b[i] = byte(c)
			want := '0' <= c && c <= '9' || 'a' <= c && c <= 'f'
			if got := idem.ValidFingerprint(string(b)); got != want {
				t.Fatalf("byte %#x at %d: ValidFingerprint = %v, want %v", c, i, got, want)
			}
		}
		b[i] = fp[i]
	}
}

// AppendResponse writes what EncodeResponse returns after the bytes already in b: in b's room
// when it has enough, with no allocation, else in one allocation of the exact size, and it
// leaves the bytes before it as they were.
func TestAppendResponse(t *testing.T) {
	r := idem.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}, "A": {"1", "2"}},
		Body: []byte(`{"id":"ch_1"}`)}
	enc := storekit.EncodeResponse(r)
	prefix := []byte("key|fingerprint")
	small := append([]byte(nil), prefix...)
	small = small[:len(small):len(small)]
	got := storekit.AppendResponse(small, r)
	if !bytes.Equal(got, append(append([]byte(nil), prefix...), enc...)) || cap(got) != len(got) {
		t.Fatalf("AppendResponse to a full slice = %q (cap %d), want %q then %q, exactly", got, cap(got), prefix, enc)
	}
	// Some room, not enough: still one allocation of the exact size, not append's growth.
	short := make([]byte, len(prefix), len(prefix)+len(enc)-1)
	copy(short, prefix)
	got = storekit.AppendResponse(short, r)
	if !bytes.Equal(got, append(append([]byte(nil), prefix...), enc...)) || cap(got) != len(got) {
		t.Fatalf("AppendResponse to a slice one byte short = %q (cap %d), want %q then %q, exactly", got, cap(got), prefix, enc)
	}
	if n := testing.AllocsPerRun(20, func() { got = storekit.AppendResponse(short, r) }); n != 1 {
		t.Fatalf("AppendResponse to a slice one byte short allocates %v times, want 1", n)
	}
	roomy := make([]byte, len(prefix), len(prefix)+len(enc))
	copy(roomy, prefix)
	if n := testing.AllocsPerRun(20, func() { got = storekit.AppendResponse(roomy, r) }); n != 0 {
		t.Fatalf("AppendResponse with room allocates %v times, want 0", n)
	}
	if &got[0] != &roomy[0] || !bytes.Equal(got[len(prefix):], enc) || !bytes.Equal(got[:len(prefix)], prefix) {
		t.Fatalf("AppendResponse with room = %q, want %q then %q in place", got, prefix, enc)
	}
	if back, err := storekit.DecodeResponse(got[len(prefix):]); err != nil || !back.Equal(r) {
		t.Fatalf("DecodeResponse = %+v, %v; want %+v", back, err, r)
	}
}
