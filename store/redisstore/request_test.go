package redisstore_test

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storekit"
)

// TestRequestLayout: a record claimed without a request is stored exactly as before requests
// were kept (nothing after the fingerprint and the route, then the response), and one with a
// request carries it as q<len>|<encoding> between the route and the response, through every
// script that rewrites the record. List reads records whose request (behind the longest route)
// does not fit its first read.
func TestRequestLayout(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	st := newStore(t, rdb)
	ctx := context.Background()
	now := time.Now().Truncate(time.Microsecond)
	fp := idem.Fingerprint([]byte("layout"))
	resp := idem.Response{Status: 201, Body: []byte("done")}
	raw := func(key string) string {
		t.Helper()
		v, err := rdb.Get(ctx, redisstore.RecordKey(st, key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	// Without a request: the fields, the fingerprint, and once completed the response, as ever.
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "plain", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatal(res, err)
	}
	old := regexp.MustCompile(`^1\|\d+\|\d+\|1\|\d+\|\|\d+\|[0-9a-z]*\|64\|` + fp + `$`)
	if v := raw("plain"); !old.MatchString(v) {
		t.Errorf("claim without a request stored as %q, not as before", v)
	}
	if err := st.Complete(ctx, "plain", res.Record.Token, resp, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if v := raw("plain"); !strings.HasSuffix(v, "|64|"+fp+string(storekit.EncodeResponse(resp))) {
		t.Errorf("completed record without a request stored as %q, not as before", v)
	}

	// With a request, behind the longest route.
	sent := &idem.Request{Method: "POST", Target: "/v1/orders", Header: map[string][]string{"Content-Type": {"application/json"}},
		Body: bytes.Repeat([]byte("x"), 3000), BodySize: 5000, Truncated: true}
	seg := fmt.Sprintf("q%d|%s", storekit.RequestLen(*sent), storekit.EncodeRequest(*sent))
	route := strings.Repeat("r", idem.MaxRouteLen)
	res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "kept", Fingerprint: fp, Route: route, Request: sent, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed || !res.Record.Request.Equal(sent) {
		t.Fatal(res, err)
	}
	if v := raw("kept"); !strings.HasSuffix(v, fp+"r256|"+route+seg) {
		t.Errorf("claim with a request stored as %.200q…", v)
	}
	if err := st.Extend(ctx, "kept", res.Record.Token, now.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, "kept", res.Record.Token, resp, now, now.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if v := raw("kept"); !strings.HasSuffix(v, route+seg+string(storekit.EncodeResponse(resp))) {
		t.Errorf("completed record with a request stored as %.200q…", v)
	}
	page, err := st.List(ctx, idem.ListQuery{})
	if err != nil || len(page.Records) != 2 {
		t.Fatalf("List = %+v, %v", page, err)
	}
	for _, r := range page.Records {
		if r.Response == nil || r.Response.Status != 201 {
			t.Errorf("List: %s has response %+v, want status 201", r.Key, r.Response)
		}
	}
	if rec, err := st.Get(ctx, "kept"); err != nil || !rec.Request.Equal(sent) || rec.Route != route || string(rec.Response.Body) != "done" {
		t.Errorf("Get = %+v, %v", rec, err)
	}
}
