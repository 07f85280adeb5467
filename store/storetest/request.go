package storetest

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// request checks idem.ReserveRequest.Request, the request a face retains for operators: a
// claim stores it and Get and a duplicate's Reserve return it; Extend and Complete keep it; a
// takeover keeps it (and sets one on a record that had none); a key claimed again after it was
// released or expired carries the new claim's request, or none; a claim without one stores
// none; binary bodies and unicode headers round-trip; the store keeps its own copy, never the
// caller's slices.
func (s suite) request(t *testing.T, b *bundle) {
	c := ctx(t)
	binary := make([]byte, 8<<10)
	for i := range binary {
		binary[i] = byte(i)
	}
	reqA := &idem.Request{Method: "POST", Target: "/v1/orders?currency=eur", BodySize: int64(len(binary)) + 100, Truncated: true,
		Header: map[string][]string{"Content-Type": {"application/octet-stream"}, "X-Caf\u00e9": {"\u00e9t\u00e9", ""}, "Authorization": {"[redacted]"}},
		Body:   binary}
	reqB := &idem.Request{Method: "PATCH", Target: "/v1/caf\u00e9", Body: []byte(`{"a":1}`), BodySize: 7}
	reserve := func(key string, req *idem.Request, now time.Time) idem.Reservation {
		t.Helper()
		res, err := b.store.Reserve(c, idem.ReserveRequest{Key: key, Fingerprint: fpA, Route: "POST /r", Request: req, Now: now, Lease: lease, TTL: ttl})
		if err != nil {
			t.Fatalf("Reserve(%q): %v", key, err)
		}
		return res
	}
	check := func(what string, got, want *idem.Request) {
		t.Helper()
		if !got.Equal(want) {
			t.Errorf("%s: Request = %s, want %s", what, describe(got), describe(want))
		}
	}

	k := b.key("request")
	mine := *reqA
	mine.Body = bytes.Clone(reqA.Body)
	mine.Header = map[string][]string{"Content-Type": {"application/octet-stream"}, "X-Caf\u00e9": {"\u00e9t\u00e9", ""}, "Authorization": {"[redacted]"}}
	res := reserve(k, &mine, b.base)
	if !res.Claimed || res.Takeover {
		t.Fatalf("first Reserve with a request: %+v, want a new claim", res)
	}
	// The caller reuses its buffers: the store must have kept its own copy.
	mine.Body[0], mine.Header["Content-Type"][0] = 0xff, "changed"
	mine.Header["X-Added"] = []string{"1"}
	check("new claim", res.Record.Request, reqA)
	check("Get after the claim", mustGet(t, b.store, k).Request, reqA)
	if res := reserve(k, reqB, b.base.Add(time.Second)); res.Claimed {
		t.Fatal("a duplicate claimed a held key")
	} else {
		check("duplicate's record", res.Record.Request, reqA)
	}
	if err := b.store.Extend(c, k, res.Record.Token, b.base.Add(lease/2)); err != nil {
		t.Fatal(err)
	}
	check("Get after Extend", mustGet(t, b.store, k).Request, reqA)
	// A takeover continues the claim: it keeps the request, whatever it is given.
	later := b.base.Add(lease + time.Second)
	res = reserve(k, reqB, later)
	if !res.Claimed || !res.Takeover {
		t.Fatalf("Reserve with a request after the lease: %+v, want a takeover", res)
	}
	check("takeover", res.Record.Request, reqA)
	check("Get after the takeover", mustGet(t, b.store, k).Request, reqA)
	if err := b.store.Complete(c, k, res.Record.Token, idem.Response{Status: 201, Body: []byte("ok")}, later, later.Add(ttl)); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, b.store, k)
	check("Get after Complete", got.Request, reqA)
	if got.Response == nil || string(got.Response.Body) != "ok" {
		t.Errorf("Get after Complete: response %+v, want the stored one", got.Response)
	}
	if res := reserve(k, reqB, later.Add(time.Second)); res.Claimed {
		t.Fatal("a replay claimed a completed key")
	} else {
		check("replay's record", res.Record.Request, reqA)
	}

	// Released, then claimed again: the new claim's request.
	rel := b.key("request-released")
	res = reserve(rel, reqA, b.base)
	if err := b.store.Release(c, rel, res.Record.Token); err != nil {
		t.Fatal(err)
	}
	res = reserve(rel, reqB, b.base.Add(time.Second))
	if !res.Claimed || res.Takeover {
		t.Fatalf("Reserve after a release: %+v, want a claim", res)
	}
	check("claim after a release", res.Record.Request, reqB)
	check("Get after that claim", mustGet(t, b.store, rel).Request, reqB)

	// A record claimed without a request has none; a takeover with one gives it one.
	none := b.key("request-none")
	check("claim without a request", mustClaim(t, b.store, none, fpA, b.base).Request, nil)
	check("Get after it", mustGet(t, b.store, none).Request, nil)
	res = reserve(none, reqB, b.base.Add(lease+time.Second))
	if !res.Claimed || !res.Takeover {
		t.Fatalf("Reserve with a request after the lease: %+v, want a takeover", res)
	}
	check("takeover of a record without a request", res.Record.Request, reqB)
	check("Get after that takeover", mustGet(t, b.store, none).Request, reqB)

	// Expired, then claimed again without a request: none.
	exp := b.key("request-expired")
	reserve(exp, reqA, b.base)
	res = mustReserve(t, b.store, exp, fpA, b.base.Add(ttl+time.Second))
	if !res.Claimed || res.Takeover {
		t.Fatalf("Reserve after expiry: %+v, want a new claim", res)
	}
	check("claim of an expired key without a request", res.Record.Request, nil)
	check("Get after that claim", mustGet(t, b.store, exp).Request, nil)
}

// describe prints a request for a failure message, its body cut short.
func describe(r *idem.Request) string {
	if r == nil {
		return "<nil>"
	}
	var sb strings.Builder
	sb.WriteString(r.Method + " " + r.Target)
	for k, v := range r.Header {
		sb.WriteString(" " + k + "=" + strings.Join(v, ","))
	}
	body := r.Body
	if len(body) > 32 {
		body = body[:32]
	}
	sb.WriteString(" body " + string(body))
	return sb.String()
}
