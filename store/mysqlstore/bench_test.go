package mysqlstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/storekit"
)

// Each benchmark has a baseline in the same run: the least the server must do for the same
// effect (the plain statements on the same table, prepared, on the same handle), so the
// figures to compare are ratios.

const benchClients = 16

func parallel16(b *testing.B) {
	gm := runtime.GOMAXPROCS(0)
	b.SetParallelism((benchClients + gm - 1) / gm)
}

var benchResponse = idem.Response{Status: 201, Body: []byte(`{"id":1}`)}

func runParallel(b *testing.B, op func(ctx context.Context, i int64) error) {
	var seq atomic.Int64
	parallel16(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := op(ctx, seq.Add(1)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkNewKey: Reserve + Complete of new keys (SELECT, INSERT, UPDATE), 16 goroutines;
// the baseline is a plain INSERT and UPDATE of the same row.
func BenchmarkNewKey(b *testing.B) {
	fp := idem.Fingerprint([]byte("bench"))
	b.Run("store", func(b *testing.B) {
		st := newStore(b, mysqlstore.Options{})
		prefix := fmt.Sprintf("b%d:", rand.Int64())
		runParallel(b, func(ctx context.Context, i int64) error {
			k := prefix + fmt.Sprint(i)
			now := time.Now()
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: 30 * time.Second, TTL: 24 * time.Hour})
			if err != nil {
				return err
			}
			return st.Complete(ctx, k, res.Record.Token, benchResponse, now, now.Add(24*time.Hour))
		})
	})
	b.Run("baseline", func(b *testing.B) {
		st := newStore(b, mysqlstore.Options{})
		ctx := context.Background()
		ins, err := st.DB().PrepareContext(ctx, "INSERT INTO "+st.Table()+" (`key`, fingerprint, state, token, lease_until, attempts, created_at, expires_at) VALUES (?, ?, 1, ?, ?, 1, ?, ?)")
		if err != nil {
			b.Fatal(err)
		}
		defer ins.Close()
		upd, err := st.DB().PrepareContext(ctx, "UPDATE "+st.Table()+" SET state = 2, response = ?, completed_at = ?, expires_at = ? WHERE `key` = ? AND token = ?")
		if err != nil {
			b.Fatal(err)
		}
		defer upd.Close()
		body := storekit.EncodeResponse(benchResponse)
		prefix := fmt.Sprintf("b%d:", rand.Int64())
		runParallel(b, func(ctx context.Context, i int64) error {
			k := prefix + fmt.Sprint(i)
			now := time.Now().UnixMicro()
			if _, err := ins.ExecContext(ctx, k, fp, now, now+30e6, now, now+86400e6); err != nil {
				return err
			}
			_, err := upd.ExecContext(ctx, body, now, now+86400e6, k, now)
			return err
		})
	})
}

// BenchmarkReplay: Reserve of a completed key (one SELECT), 16 goroutines, over 10,000 keys;
// the baseline is the plain SELECT of the row.
func BenchmarkReplay(b *testing.B) {
	fp := idem.Fingerprint([]byte("bench"))
	const keys = 10_000
	st := newStore(b, mysqlstore.Options{})
	ctx := context.Background()
	now := time.Now()
	body := storekit.EncodeResponse(benchResponse)
	for i := 0; i < keys; i += 1000 {
		q := "INSERT INTO " + st.Table() + " VALUES "
		args := []any{}
		for j := i; j < i+1000; j++ {
			if j > i {
				q += ","
			}
			q += "(?, ?, 2, 1, 1, 1, ?, 1, 1, ?)"
			args = append(args, fmt.Sprintf("r%d", j+1), fp, body, now.Add(24*time.Hour).UnixMicro())
		}
		if _, err := st.DB().ExecContext(ctx, q, args...); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("store", func(b *testing.B) {
		runParallel(b, func(ctx context.Context, _ int64) error {
			res, err := st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprintf("r%d", 1+rand.IntN(keys)), Fingerprint: fp, Now: time.Now(), Lease: 30 * time.Second, TTL: 24 * time.Hour})
			if err == nil && (res.Claimed || res.Record.Response == nil) {
				err = fmt.Errorf("not a replay: %+v", res)
			}
			return err
		})
	})
	b.Run("baseline", func(b *testing.B) {
		sel, err := st.DB().PrepareContext(ctx, "SELECT fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at FROM "+st.Table()+" WHERE `key` = ?")
		if err != nil {
			b.Fatal(err)
		}
		defer sel.Close()
		runParallel(b, func(ctx context.Context, _ int64) error {
			var fp string
			var state, token, lease, attempts, created, completed, expires int64
			var resp []byte
			return sel.QueryRowContext(ctx, fmt.Sprintf("r%d", 1+rand.IntN(keys))).Scan(&fp, &state, &token, &lease, &attempts, &resp, &created, &completed, &expires)
		})
	})
}
