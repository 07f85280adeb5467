package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storekit"
)

// TestRecordMemory reports what a stored record costs in Redis memory, against a bare proxy
// that stores only the response (a plain SET of its storekit.EncodeResponse bytes, with a TTL,
// under a key of the same length): used_memory before and after writing the records, and
// MEMORY USAGE of the records and of the index keys. The records are completed with a small
// response, under keys of a typical length (a 16-byte scope hash, a separator and a UUID: 53
// bytes) and of 100 bytes. Run it against a Redis that nothing else writes to, such as a
// private redis-server:
//
//	IDEM_REDIS_ADDR=127.0.0.1:6392 IDEM_REDIS_BENCH=1 go test -run TestRecordMemory -v ./store/redisstore/
//
// IDEM_REDIS_MEM_RECORDS sets the numbers of records (default "100000,200000").
func TestRecordMemory(t *testing.T) {
	if os.Getenv("IDEM_REDIS_BENCH") != "1" {
		t.Skip("set IDEM_REDIS_BENCH=1 to measure the memory per record")
	}
	counts := []int{100000, 200000}
	if v := os.Getenv("IDEM_REDIS_MEM_RECORDS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil || n <= 0 {
				t.Fatalf("IDEM_REDIS_MEM_RECORDS=%q", v)
			}
			counts = append(counts, n)
		}
	}
	for _, n := range counts {
		for _, keyLen := range []int{53, 100} {
			t.Run(fmt.Sprintf("%d records, %d-byte keys", n, keyLen), func(t *testing.T) { recordMemory(t, n, keyLen) })
		}
	}
}

func recordMemory(t *testing.T, n, keyLen int) {
	rdb := standalone(t)
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	resp := idem.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"0123456789"}`)}
	now := time.Now()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("3f2a9c0b7d1e4f56|%08x-1b2c-4d3e-8f90-%012x", uint32(i*2654435761), i)
		keys[i] += strings.Repeat("k", keyLen-len(keys[i]))
	}
	used := func() int64 {
		time.Sleep(200 * time.Millisecond) // let lazy frees finish
		for _, line := range strings.Split(rdb.Info(ctx, "memory").Val(), "\r\n") {
			if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no used_memory in INFO memory")
		return 0
	}
	usage := func(keys []string) int64 {
		var total int64
		for i := 0; i < len(keys); i += 1000 {
			chunk := keys[i:min(i+1000, len(keys))]
			cmds := make([]*redis.IntCmd, len(chunk))
			_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for j, k := range chunk {
					cmds[j] = p.MemoryUsage(ctx, k, 0)
				}
				return nil
			})
			if err != nil && err != redis.Nil {
				t.Fatal(err)
			}
			for _, c := range cmds {
				total += c.Val()
			}
		}
		return total
	}
	// run calls fn for every key on 32 goroutines.
	run := func(fn func(k string) error) {
		var wg sync.WaitGroup
		for w := range 32 {
			wg.Go(func() {
				for i := w; i < n; i += 32 {
					if err := fn(keys[i]); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}

	// The bare proxy: the response alone, with a TTL.
	bare := fmt.Sprintf("idembare:%08x:", time.Now().UnixNano()&0xffffffff)
	value := storekit.EncodeResponse(resp)
	m0 := used()
	run(func(k string) error { return rdb.Set(ctx, bare+k, value, time.Hour).Err() })
	bareUsed := used() - m0
	bareKeys := make([]string, n)
	for i, k := range keys {
		bareKeys[i] = bare + k
	}
	bareUsage := usage(bareKeys)
	for i := 0; i < n; i += 1000 {
		if err := rdb.Unlink(ctx, bareKeys[i:min(i+1000, n)]...).Err(); err != nil {
			t.Fatal(err)
		}
	}

	st := newStore(t, rdb)
	m0 = used()
	run(func(k string) error {
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
		if err == nil {
			err = st.Complete(ctx, k, res.Record.Token, resp, now, now.Add(time.Hour))
		}
		return err
	})
	storeUsed := used() - m0
	recKeys := make([]string, n)
	for i, k := range keys {
		recKeys[i] = redisstore.RecordKey(st, k)
	}
	idxKeys := make([]string, redisstore.Shards)
	for sh := range idxKeys {
		idxKeys[sh] = redisstore.PrefixOf(st) + redisstore.Tag(sh) + "i"
	}
	rec, idx := usage(recKeys), usage(idxKeys)
	per := func(v int64) int64 { return v / int64(n) }
	t.Logf("%d records, %d-byte keys, a %d-byte response: bare proxy used_memory %d B/record (MEMORY USAGE %d); store used_memory %d B/record (%.2f× bare): MEMORY USAGE record %d + index %d (index +%.0f%% of the record)",
		n, keyLen, len(value), per(bareUsed), per(bareUsage), per(storeUsed), float64(storeUsed)/float64(bareUsed),
		per(rec), per(idx), 100*float64(idx)/float64(rec))
	if idx > rec {
		t.Errorf("the index takes %d B per record, more than the record itself (%d B)", per(idx), per(rec))
	}
}
