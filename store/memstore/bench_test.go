package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

var benchResp = idem.Response{
	Status: 201,
	Header: map[string][]string{"Content-Type": {"application/json"}, "Content-Length": {"86"}},
	Body:   []byte(`{"id":"ch_1","object":"charge","amount":1000,"currency":"eur","status":"succeeded"}`),
}

// BenchmarkNewKey is the store's share of a new key: Reserve then Complete, on a store that
// already holds 100,000 records (a busy day of keys: the map does not fit in the CPU's cache).
// Keys are made beforehand; run it with -benchtime 100000x or less.
func BenchmarkNewKey(b *testing.B) {
	ctx := context.Background()
	st := memstore.New()
	fp := idem.Fingerprint([]byte("body"))
	now := time.Now()
	const prefill, most = 100_000, 1_000_000
	keys := make([]string, prefill+most)
	for i := range keys {
		keys[i] = "0195f1c4-7f3e-7a2b-9c1d-" + strconv.Itoa(1_000_000_000_000+i)
	}
	complete := func(key string) {
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: 24 * time.Hour})
		if err != nil || !res.Claimed {
			b.Fatal(res, err)
		}
		if err := st.Complete(ctx, key, res.Record.Token, benchResp, now, now.Add(24*time.Hour)); err != nil {
			b.Fatal(err)
		}
	}
	for _, k := range keys[:prefill] {
		complete(k)
	}
	i := prefill
	b.ReportAllocs()
	for b.Loop() {
		if i == len(keys) {
			b.Fatal("run it with -benchtime 100000x")
		}
		complete(keys[i])
		i++
	}
}
