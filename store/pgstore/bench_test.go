package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/storekit"
)

// benchClients is the number of concurrent clients, as in the pgbench comparison
// (scripts/bench-pgbench.sh): 16.
const benchClients = 16

func parallel16(b *testing.B) {
	gm := runtime.GOMAXPROCS(0)
	b.SetParallelism((benchClients + gm - 1) / gm)
}

// benchResponse is the response the pgbench script stores too (hex 0100c901007b226964223a317d).
var benchResponse = idem.Response{Status: 201, Body: []byte(`{"id":1}`)}

// BenchmarkNewKey: the new-key path, Reserve + Complete, by 16 goroutines on a 16-connection
// pool. Compare its ops/s with pgbench's TPS for the same two statements
// (scripts/bench-pgbench.sh runs both and prints the ratio).
func BenchmarkNewKey(b *testing.B) { benchNewKey(b, pgstore.Options{}) }

// BenchmarkNewKeyGroupCommit: the same with Options.GroupCommit 2 (the gateway's default):
// the 16 goroutines' calls share transactions.
func BenchmarkNewKeyGroupCommit(b *testing.B) { benchNewKey(b, pgstore.Options{GroupCommit: 2}) }

func benchNewKey(b *testing.B, opt pgstore.Options) {
	st := newStore(b, opt)
	fp := idem.Fingerprint([]byte("bench"))
	var seq atomic.Int64
	prefix := fmt.Sprintf("b%d:", rand.Int64())
	parallel16(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			k := prefix + fmt.Sprint(seq.Add(1))
			now := time.Now()
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: 24 * time.Hour})
			if err != nil || !res.Claimed {
				b.Fatal(err, res.Claimed)
			}
			if err := st.Complete(ctx, k, res.Record.Token, benchResponse, now, now.Add(24*time.Hour)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkReplay: Reserve of a completed key (the replay path, one round trip), by 16
// goroutines, over 10,000 keys.
func BenchmarkReplay(b *testing.B) {
	st := newStore(b, pgstore.Options{})
	fp := idem.Fingerprint([]byte("bench"))
	ctx := context.Background()
	const keys = 10_000
	now := time.Now()
	if _, err := st.Pool().Exec(ctx, `INSERT INTO `+st.Table()+` (key, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at)
		SELECT 'r' || i, $1, 2, $2, $2, 1, $3, $2, $2, $4 FROM generate_series(1, $5) AS i`,
		fp, now.UnixMicro(), storekit.EncodeResponse(benchResponse), now.Add(24*time.Hour).UnixMicro(), keys); err != nil {
		b.Fatal(err)
	}
	parallel16(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := fmt.Sprintf("r%d", 1+rand.IntN(keys))
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: time.Now(), Lease: 30 * time.Second, TTL: 24 * time.Hour})
			if err != nil || res.Claimed || res.Record.Response == nil {
				b.Fatal(err, res.Claimed)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}
