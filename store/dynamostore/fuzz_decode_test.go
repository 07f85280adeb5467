package dynamostore

import (
	"errors"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// FuzzDecodeItem feeds record items, as a damaged table or another writer could hold them, to
// the item decoder. It must not panic; it returns a whole record or an error matching
// idem.ErrCorruptRecord; a completed one-part record has the response its bytes encode, and a
// multi-part one reports 2 to MaxParts parts.
func FuzzDecodeItem(f *testing.F) {
	good := storekit.EncodeResponse(idem.Response{Status: 200, Body: []byte(`{"ok":true}`)})
	f.Add(uint16(0x3ff), uint16(0), "fp", "completed", "1767225600000000", "1767225602000000", "1", "1767225600000000", "1767225601000000", "1767312000000000", "1", good)
	f.Add(uint16(0x1ff), uint16(0), "fp", "in_progress", "5", "10", "1", "0", "0", "20", "", []byte(nil))
	f.Add(uint16(0x3ff), uint16(0), "fp", "completed", "5", "10", "1", "0", "0", "20", "3", []byte("first part"))
	f.Add(uint16(0x3ff), uint16(0), "fp", "completed", "5", "10", "1", "0", "0", "20", "11", good)
	f.Add(uint16(0x3ff), uint16(0x004), "fp", "completed", "5", "10", "1", "0", "0", "20", "1", good) // token as a string
	f.Add(uint16(0x0ff), uint16(0), "fp", "completed", "5", "10", "1", "0", "0", "20", "1", good)     // no response
	f.Add(uint16(0x3ff), uint16(0), "fp", "done", "5", "10", "1", "0", "0", "20", "1", good)
	names := []string{attrFingerprint, attrState, attrToken, attrLeaseUntil, attrAttempts, attrCreatedAt, attrCompletedAt, attrExpiresAt, attrResponse, attrParts}
	f.Fuzz(func(t *testing.T, present, swapped uint16, fp, st, tok, lease, att, crt, cmp, exp, parts string, resp []byte) {
		values := []string{fp, st, tok, lease, att, crt, cmp, exp, string(resp), parts}
		it := map[string]types.AttributeValue{}
		for i, n := range names {
			if present&(1<<i) == 0 {
				continue
			}
			// Each attribute has its type (S, N or B); a set bit of swapped stores it as
			// another type, as a foreign writer might.
			kind := 1 // N
			switch n {
			case attrFingerprint, attrState:
				kind = 0 // S
			case attrResponse:
				kind = 2 // B
			}
			if swapped&(1<<i) != 0 {
				kind = (kind + 1) % 3
			}
			switch kind {
			case 0:
				it[n] = &types.AttributeValueMemberS{Value: values[i]}
			case 1:
				it[n] = &types.AttributeValueMemberN{Value: values[i]}
			default:
				it[n] = &types.AttributeValueMemberB{Value: []byte(values[i])}
			}
		}
		rec, nparts, err := (&Store{}).decode("k", it)
		if err != nil {
			if !errors.Is(err, idem.ErrCorruptRecord) {
				t.Fatalf("error %v does not match ErrCorruptRecord", err)
			}
			if rec.Key != "" || rec.Response != nil || nparts != 0 {
				t.Fatalf("half-filled record with an error: %+v, %d parts", rec, nparts)
			}
			return
		}
		if rec.Key != "k" || rec.Fingerprint != fp {
			t.Fatalf("key or fingerprint lost: %+v", rec)
		}
		switch rec.State {
		case idem.StateInProgress:
			if rec.Response != nil || nparts != 0 {
				t.Fatalf("in-progress record with a response: %+v, %d parts", rec, nparts)
			}
		case idem.StateCompleted:
			switch {
			case rec.Response == nil:
				t.Fatal("completed record without a response")
			case nparts == 1:
				want, derr := storekit.DecodeResponse(resp)
				if derr != nil || !rec.Response.Equal(want) {
					t.Fatalf("response %+v, stored bytes decode to %+v (%v)", rec.Response, want, derr)
				}
			case nparts < 2 || nparts > MaxParts:
				t.Fatalf("%d parts accepted", nparts)
			}
		default:
			t.Fatalf("state %v accepted", rec.State)
		}
		if n, err := strconv.ParseInt(tok, 10, 64); err != nil || rec.Token != n {
			t.Fatalf("token %q decoded as %d", tok, rec.Token)
		}
	})
}
