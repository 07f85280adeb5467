package redisstore

import (
	"errors"
	"strconv"
	"testing"

	"github.com/idemkit/idem"
)

// FuzzDecodeRecord feeds stored hashes, as a damaged or foreign Redis could return them, to the
// record decoder. It must not panic; it returns a whole record or an error matching
// idem.ErrCorruptRecord, never a half-filled record; a completed record always has a
// response, the one the stored bytes encode.
func FuzzDecodeRecord(f *testing.F) {
	good := idem.EncodeResponse(idem.Response{Status: 201, Header: map[string][]string{"Location": {"/x"}}, Body: []byte("ok")})
	f.Add(uint16(0x1ff), "fp", "2", "1767225600000000", "1767225602000000", "1", "1767225600000000", "1767225601000000", "1767312000000000", good)
	f.Add(uint16(0x1ff), "fp", "1", "5", "10", "2", "0", "0", "20", []byte(nil))
	f.Add(uint16(0x0ff), "fp", "2", "5", "10", "1", "0", "0", "20", []byte(nil)) // completed, no response
	f.Add(uint16(0x1ff), "fp", "3", "5", "10", "1", "0", "0", "20", good)        // unknown state
	f.Add(uint16(0x1ff), "fp", "2", "x", "10", "1", "0", "0", "20", good)        // bad token
	f.Add(uint16(0x1ff), "fp", "2", "5", "10", "1", "0", "0", "20", []byte{1, 0, 0x80})
	f.Add(uint16(0x001), "fp", "", "", "", "", "", "", "", []byte(nil))
	names := []string{"fp", "st", "tok", "lease", "att", "crt", "cmp", "exp", "resp"}
	f.Fuzz(func(t *testing.T, present uint16, fp, st, tok, lease, att, crt, cmp, exp string, resp []byte) {
		values := []string{fp, st, tok, lease, att, crt, cmp, exp, string(resp)}
		fields := func(yield func(name, value string) bool) {
			for i, n := range names {
				if present&(1<<i) != 0 && !yield(n, values[i]) {
					return
				}
			}
		}
		rec, err := decode("k", fields)
		if err != nil {
			if !errors.Is(err, idem.ErrCorruptRecord) {
				t.Fatalf("error %v does not match ErrCorruptRecord", err)
			}
			if rec.Key != "" || rec.State != 0 || rec.Response != nil {
				t.Fatalf("half-filled record with an error: %+v", rec)
			}
			return
		}
		if rec.Key != "k" || rec.Fingerprint != fp {
			t.Fatalf("key or fingerprint lost: %+v", rec)
		}
		switch rec.State {
		case idem.StateInProgress:
			if rec.Response != nil {
				t.Fatalf("in-progress record with a response: %+v", rec)
			}
		case idem.StateCompleted:
			want, derr := idem.DecodeResponse(resp)
			if rec.Response == nil || derr != nil || !rec.Response.Equal(want) {
				t.Fatalf("completed record's response %+v, stored bytes decode to %+v (%v)", rec.Response, want, derr)
			}
		default:
			t.Fatalf("state %v accepted", rec.State)
		}
		if n, err := strconv.ParseInt(tok, 10, 64); err != nil || rec.Token != n {
			t.Fatalf("token %q decoded as %d", tok, rec.Token)
		}
	})
}
