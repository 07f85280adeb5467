package retention

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// RedisResult is what records of one body size take in Redis.
type RedisResult struct {
	BodyBytes int // the stored response body
	Records   int
	// UsageMean is the mean MEMORY USAGE (bytes) of a sample of the records' keys.
	UsageMean float64
	Sampled   int
	// UsedDelta is the change of INFO memory used_memory over all the records, per record
	// (other clients of the server add noise to it).
	UsedDelta float64
	// ValueBytes is the mean length of a record's value (STRLEN).
	ValueBytes float64
	// IndexPerRecord is the MEMORY USAGE of the listing index (the sorted sets beside the
	// records, one member per record) divided by the records.
	IndexPerRecord float64
	// TTL is the storage TTL Redis holds on a fresh record written with a 24h window.
	TTL time.Duration
}

// RedisMemory writes n completed records with a body of each size through redisstore on the
// server at addr (a 24h window, like a payments API), measures them and deletes them again.
func RedisMemory(ctx context.Context, addr string, n int, bodySizes []int) ([]RedisResult, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 16})
	defer rdb.Close()
	var out []RedisResult
	for _, size := range bodySizes {
		r, err := redisMemory(ctx, rdb, n, size)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO memory has no used_memory")
}

func redisMemory(ctx context.Context, rdb *redis.Client, n, size int) (RedisResult, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idem-bench-retention-" + hex.EncodeToString(b[:]) + ":"
	st, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: prefix})
	if err != nil {
		return RedisResult{}, err
	}
	defer func() { _ = deletePrefix(context.WithoutCancel(ctx), rdb, prefix) }()
	body := bytes.Repeat([]byte("x"), size)
	if size > 2 {
		body[0], body[size-1] = '"', '"'
	}
	resp := idem.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: body}
	fp := idem.Fingerprint([]byte("redis-memory"))
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return RedisResult{}, err
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				now := time.Now()
				k := Key(int64(i) * stride)
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: 24 * time.Hour})
				if err == nil {
					err = st.Complete(ctx, k, res.Record.Token, resp, now, now.Add(24*time.Hour))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return RedisResult{}, err
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return RedisResult{}, err
	}
	r := RedisResult{BodyBytes: size, Records: n, UsedDelta: float64(after-before) / float64(n)}
	// Sample keys by SCAN, then MEMORY USAGE (SAMPLES 0: exact), STRLEN and PTTL of each
	// record; the listing index's sorted sets, under the same prefix, are summed apart.
	var usage, strlen, index int64
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			return r, err
		}
		if typ != "string" {
			u, err := rdb.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				return r, err
			}
			index += u
			continue
		}
		if r.Sampled >= 1000 {
			continue
		}
		u, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			return r, err
		}
		l, err := rdb.StrLen(ctx, k).Result()
		if err != nil {
			return r, err
		}
		if r.Sampled == 0 {
			if r.TTL, err = rdb.PTTL(ctx, k).Result(); err != nil {
				return r, err
			}
		}
		usage += u
		strlen += l
		r.Sampled++
	}
	r.IndexPerRecord = float64(index) / float64(n)
	if err := iter.Err(); err != nil {
		return r, err
	}
	if r.Sampled > 0 {
		r.UsageMean = float64(usage) / float64(r.Sampled)
		r.ValueBytes = float64(strlen) / float64(r.Sampled)
	}
	return r, nil
}

func deletePrefix(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
			return err
		}
	}
	return iter.Err()
}
