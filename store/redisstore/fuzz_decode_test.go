package redisstore

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// FuzzDecodeRecord feeds stored values, as a damaged or foreign Redis could return them, to the
// record decoder. It must not panic; it returns a whole record or an error matching
// idem.ErrCorruptRecord, never a half-filled record; a completed record always has a
// response, the one the stored bytes encode. A claim Reserve writes decodes to itself.
func FuzzDecodeRecord(f *testing.F) {
	good := string(storekit.EncodeResponse(idem.Response{Status: 201, Header: map[string][]string{"Location": {"/x"}}, Body: []byte("ok")}))
	f.Add("2|1767225600000000|1767225602000000|1|1767225600000000|1767225601000000|1767312000000000|op|2|fp" + good)
	f.Add("1|5|10|2|0||20|op|2|fp")
	f.Add("2|5|10|1|0|0|20|op|2|fp")        // completed, no response
	f.Add("3|5|10|1|0|0|20|op|2|fp" + good) // unknown state
	f.Add("2|x|10|1|0|0|20|op|2|fp" + good) // bad token
	f.Add("2|5|10|1|0|0|20|op|2|fp\x01\x00\x80")
	f.Add("1|5|10|1|0||20|op|99|fp") // fingerprint longer than the value
	f.Add("1|5|10|1|0||20|op|-1|fp")
	f.Add("1|")
	f.Add("1|5|10|2|0||20|op|2|fpr7|POST /x")         // with a route
	f.Add("2|5|10|1|0|0|20|op|2|fpr7|POST /x" + good) // completed, with a route
	f.Add("1|5|10|2|0||20|op|2|fpr99|POST /x")        // route longer than the value
	f.Add("2|5|10|1|0|0|20|op|2|fpr|" + good)         // route without a length
	f.Fuzz(func(t *testing.T, v string) {
		rec, op, err := decode("k", v)
		if err != nil {
			if !errors.Is(err, idem.ErrCorruptRecord) {
				t.Fatalf("error %v does not match ErrCorruptRecord", err)
			}
			if rec.Key != "" || rec.State != 0 || rec.Response != nil || op != "" {
				t.Fatalf("half-filled record with an error: %+v", rec)
			}
			return
		}
		f := strings.SplitN(v, "|", 10)
		if n, _ := strconv.ParseInt(f[8], 10, 64); rec.Key != "k" || int(n) != len(rec.Fingerprint) || !strings.HasPrefix(f[9], rec.Fingerprint) {
			t.Fatalf("key or fingerprint lost: %+v from %q", rec, v)
		}
		switch rec.State {
		case idem.StateInProgress:
			if rec.Response != nil {
				t.Fatalf("in-progress record with a response: %+v", rec)
			}
		case idem.StateCompleted:
			after := f[9][len(rec.Fingerprint):]
			if strings.HasPrefix(after, "r") {
				after = after[len("r"+strconv.Itoa(len(rec.Route))+"|")+len(rec.Route):]
			}
			want, derr := storekit.DecodeResponse([]byte(after))
			if rec.Response == nil || derr != nil || !rec.Response.Equal(want) {
				t.Fatalf("completed record's response %+v, stored bytes decode to %+v (%v)", rec.Response, want, derr)
			}
		default:
			t.Fatalf("state %v accepted", rec.State)
		}
		if n, err := strconv.ParseInt(f[1], 10, 64); err != nil || rec.Token != n {
			t.Fatalf("token %q decoded as %d", f[1], rec.Token)
		}
		if op != f[7] {
			t.Fatalf("op %q decoded as %q", f[7], op)
		}
		// What Reserve writes for a claim of this record's fields reads back as written.
		if rec.State == idem.StateInProgress && !strings.Contains(op, "|") {
			claim := rec
			claim.Attempts, claim.CompletedAt = 1, time.Time{}
			var enc []byte
			if claim.Request != nil {
				enc = storekit.EncodeRequest(*claim.Request)
			}
			back, backOp, err := decode("k", string(encodeClaim(claim, enc, op)))
			if err != nil || backOp != op || back.Token != claim.Token || back.Fingerprint != claim.Fingerprint || back.Route != claim.Route || !back.Request.Equal(claim.Request) ||
				!back.LeaseUntil.Equal(claim.LeaseUntil) || !back.ExpiresAt.Equal(claim.ExpiresAt) ||
				!back.CreatedAt.Equal(claim.CreatedAt) || back.Attempts != 1 || !back.CompletedAt.IsZero() {
				t.Fatalf("claim %+v read back as %+v, %q, %v", claim, back, backOp, err)
			}
		}
	})
}
