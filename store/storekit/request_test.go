package storekit_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

func TestRequestCodecRoundTrip(t *testing.T) {
	t.Parallel()
	cases := []idem.Request{
		{},
		{Method: "POST", Target: "/v1/orders?x=1"},
		{Method: "POST", Target: "/", Body: []byte{0, 1, 2, 0}, BodySize: 4},
		{Method: "PATCH", Target: "/a", Header: map[string][]string{"A": {"1", "2"}, "B": {""}, "C": {}}, Body: []byte("ab"), BodySize: 1 << 40, Truncated: true},
		{Method: "POST", Target: strings.Repeat("/é", 200), Body: bytes.Repeat([]byte("x"), 1<<16), BodySize: 1 << 16},
	}
	for _, r := range cases {
		b := storekit.EncodeRequest(r)
		if len(b) != storekit.RequestLen(r) {
			t.Errorf("%+v: encoded %d bytes, RequestLen says %d", r, len(b), storekit.RequestLen(r))
		}
		got, err := storekit.DecodeRequest(b)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if !got.Equal(&r) {
			t.Errorf("round trip: got %+v, want %+v", got, r)
		}
		if !bytes.Equal(storekit.EncodeRequest(got), b) {
			t.Errorf("%+v: encoding not stable", r)
		}
	}
}

func TestRequestCodecRejectsCorruption(t *testing.T) {
	t.Parallel()
	good := storekit.EncodeRequest(idem.Request{Method: "POST", Target: "/x", Header: map[string][]string{"A": {"b"}}, Body: []byte("body"), BodySize: 4})
	bad := [][]byte{nil, {1}, {2, 0}, {1, 2}, good[:5], append(append([]byte(nil), good[:2]...), 0xff, 0xff)}
	// A body longer than the size it claims.
	lying := storekit.EncodeRequest(idem.Request{Method: "POST", Body: []byte("body"), BodySize: 2})
	bad = append(bad, lying)
	for _, b := range bad {
		if _, err := storekit.DecodeRequest(b); !errors.Is(err, idem.ErrCorruptRecord) {
			t.Errorf("DecodeRequest(%x) = %v, want ErrCorruptRecord", b, err)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add(storekit.EncodeRequest(idem.Request{Method: "POST", Target: "/x", Header: map[string][]string{"A": {"b", "c"}}, Body: []byte("body"), BodySize: 9, Truncated: true}))
	f.Add([]byte{1, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := storekit.DecodeRequest(b)
		if err != nil {
			return
		}
		if again, err := storekit.DecodeRequest(storekit.EncodeRequest(r)); err != nil || !again.Equal(&r) {
			t.Fatalf("re-encoding %+v: %+v, %v", r, again, err)
		}
	})
}

// TestFitRequestBound: whatever the request (many headers, long ones, a long target, a large
// body), FitRequest's result encodes within the limit, keeps what fits in order, and says when
// it left something out. (Planted: the body kept whole → the bound fails; headers kept whole →
// the bound fails.)
func TestFitRequestBound(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		r := idem.Request{Method: "POST", Target: "/" + strings.Repeat("ü", rng.IntN(300))}
		if n := rng.IntN(200); n > 0 {
			r.Header = map[string][]string{}
			for j := range n {
				r.Header["H"+strings.Repeat("n", j)] = []string{strings.Repeat("v", rng.IntN(400))}
			}
		}
		r.Body = bytes.Repeat([]byte("b"), rng.IntN(20000))
		r.BodySize = int64(len(r.Body))
		limit := rng.IntN(9000)
		got := storekit.FitRequest(r, limit)
		if got == nil {
			if limit >= 2+2+1+4+2 {
				t.Fatalf("case %d: limit %d gave nil", i, limit)
			}
			continue
		}
		enc := storekit.EncodeRequest(*got)
		if len(enc) > limit {
			t.Fatalf("case %d: limit %d, encoded %d bytes", i, limit, len(enc))
		}
		whole := storekit.RequestLen(r) <= limit
		if whole != !got.Truncated {
			t.Fatalf("case %d: whole request fits: %v, Truncated: %v", i, whole, got.Truncated)
		}
		if whole && !got.Equal(&r) {
			t.Fatalf("case %d: a request that fits came back changed", i)
		}
		if got.BodySize != r.BodySize || !bytes.HasPrefix(r.Body, got.Body) || !strings.HasPrefix(r.Target, got.Target) {
			t.Fatalf("case %d: size %d, body or target not a prefix", i, got.BodySize)
		}
	}
}

// TestFitRequestKeepsBodyPrefix: a large body leaves its first bytes within the bound.
func TestFitRequestKeepsBodyPrefix(t *testing.T) {
	t.Parallel()
	r := idem.Request{Method: "POST", Target: "/v1/orders", Header: map[string][]string{"Content-Type": {"application/json"}},
		Body: []byte(`{"amount":100,"note":"` + strings.Repeat("z", 10000) + `"}`)}
	r.BodySize = int64(len(r.Body))
	got := storekit.FitRequest(r, 4096)
	if n := len(storekit.EncodeRequest(*got)); n != 4096 {
		t.Errorf("encoded %d bytes, want the whole bound of 4096 used", n)
	}
	if !got.Truncated || got.BodySize != r.BodySize || !bytes.HasPrefix(got.Body, []byte(`{"amount":100`)) || got.Header["Content-Type"][0] != "application/json" {
		t.Errorf("got %+v", got)
	}
}
