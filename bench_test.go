package idem_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

var benchResp = idem.Response{
	Status: 201,
	Header: map[string][]string{"Content-Type": {"application/json"}},
	Body:   []byte(`{"id":"ch_1","amount":1000,"currency":"eur","status":"succeeded"}`),
}

func benchEngine(b *testing.B, opt idem.Options) *idem.Engine {
	opt.Logger = quiet
	e, err := idem.New(memstore.New(), opt)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func ok(context.Context) (idem.Response, error) { return benchResp, nil }

// BenchmarkDoNewKey: claim, run, complete, one new key per operation, without heartbeat.
func BenchmarkDoNewKey(b *testing.B) {
	e := benchEngine(b, idem.Options{Heartbeat: -1})
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	for b.Loop() {
		if res, err := e.Do(ctx, "key-"+strconv.FormatInt(n.Add(1), 10), fp1, ok); err != nil || res.Replayed {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoNewKeyHeartbeat is BenchmarkDoNewKey with the default background heartbeat.
func BenchmarkDoNewKeyHeartbeat(b *testing.B) {
	e := benchEngine(b, idem.Options{})
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	for b.Loop() {
		if res, err := e.Do(ctx, "key-"+strconv.FormatInt(n.Add(1), 10), fp1, ok); err != nil || res.Replayed {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoReplay: the same key again and again, answered from the store.
func BenchmarkDoReplay(b *testing.B) {
	e := benchEngine(b, idem.Options{})
	ctx := context.Background()
	if _, err := e.Do(ctx, "k", fp1, ok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := e.Do(ctx, "k", fp1, ok); err != nil || !res.Replayed {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoReplayCached: the same, answered from the local cache.
func BenchmarkDoReplayCached(b *testing.B) {
	e := benchEngine(b, idem.Options{CacheSize: 1024})
	ctx := context.Background()
	if _, err := e.Do(ctx, "k", fp1, ok); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := e.Do(ctx, "k", fp1, ok); err != nil || !res.Replayed {
			b.Fatal(err)
		}
	}
}
