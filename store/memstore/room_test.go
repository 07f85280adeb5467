package memstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// Claims made while responses of one size are stored get room for that size; responses of
// other sizes, larger and much smaller, completed in any order, are stored whole and leave the
// keys, fingerprints and responses of the other records as they were.
func TestRoomForResponses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	s := New()
	now := time.Unix(1_700_000_000, 0)
	sizes := []int{0, 1, 30, 100, 101, 200, 900, 1000, 2000, 5000}
	type claim struct {
		key, fp string
		token   int64
	}
	var open []claim
	want := map[string]idem.Response{}
	fps := map[string]string{}
	for step := range 4000 {
		if len(open) == 0 || rng.IntN(3) > 0 && len(open) < 50 {
			key := fmt.Sprintf("key-%d-%s", step, bytes.Repeat([]byte("k"), rng.IntN(40)))
			fp := idem.Fingerprint([]byte(key))
			res, err := s.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !res.Claimed {
				t.Fatalf("Reserve(%q) = %+v, %v", key, res, err)
			}
			open = append(open, claim{key, fp, res.Record.Token})
			fps[key] = fp
			continue
		}
		j := rng.IntN(len(open))
		c := open[j]
		open = append(open[:j], open[j+1:]...)
		body := make([]byte, sizes[rng.IntN(len(sizes))])
		for k := range body {
			body[k] = byte(rng.Uint32())
		}
		resp := idem.Response{Status: 200 + rng.IntN(300), Body: body}
		if rng.IntN(2) == 0 {
			resp.Header = map[string][]string{"Content-Type": {"application/json"}, "X-Step": {fmt.Sprint(step)}}
		}
		if err := s.Complete(ctx, c.key, c.token, resp, now, now.Add(time.Hour)); err != nil {
			t.Fatalf("Complete(%q): %v", c.key, err)
		}
		want[c.key] = resp
	}
	for key, fp := range fps {
		rec, err := s.Get(ctx, key)
		if err != nil || rec.Key != key || rec.Fingerprint != fp {
			t.Fatalf("Get(%q) = %q %q, %v; want the key and fingerprint %q", key, rec.Key, rec.Fingerprint, err, fp)
		}
		resp, done := want[key]
		switch {
		case !done && (rec.State != idem.StateInProgress || rec.Response != nil):
			t.Fatalf("Get(%q): %v with %v, want in progress without a response", key, rec.State, rec.Response)
		case done && (rec.State != idem.StateCompleted || rec.Response == nil || !rec.Response.Equal(resp)):
			t.Fatalf("Get(%q): %v with %+v, want completed with %+v", key, rec.State, rec.Response, resp)
		}
	}
}

// TestRecordWithoutRequestCostsAsBefore: a record's head did not grow when heads learned where
// a retained request ends (reqLen fits in the padding), and a claim without a request has a
// blob of its key, packed fingerprint and route only: a store that keeps no requests holds the
// same bytes per record as before. A claim with one costs exactly its encoding more.
func TestRecordWithoutRequestCostsAsBefore(t *testing.T) {
	if n := unsafe.Sizeof(head{}); n != 72 {
		t.Errorf("head is %d bytes, was 72", n)
	}
	s := New()
	now := time.Now()
	fp := idem.Fingerprint([]byte("x"))
	if _, err := s.Reserve(context.Background(), idem.ReserveRequest{Key: "plain", Fingerprint: fp, Route: "POST /r", Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	i, _ := s.find("plain")
	if got, want := len(*s.blob(i)), len("plain")+32+len("POST /r"); got != want {
		t.Errorf("blob of a claim without a request: %d bytes, want %d", got, want)
	}
	sent := idem.Request{Method: "POST", Target: "/r", Body: []byte("body"), BodySize: 4}
	if _, err := s.Reserve(context.Background(), idem.ReserveRequest{Key: "kept", Fingerprint: fp, Route: "POST /r", Request: &sent, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	i, _ = s.find("kept")
	if got, want := len(*s.blob(i)), len("kept")+32+len("POST /r")+storekit.RequestLen(sent); got != want {
		t.Errorf("blob of a claim with a request: %d bytes, want %d", got, want)
	}
}
