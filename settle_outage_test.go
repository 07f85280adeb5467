package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// downStore is an outageStore whose Complete also fails, at once (a refused connection),
// while down is set.
type downStore struct{ outageStore }

var errRefused = errors.New("connection refused")

func (s *downStore) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expires time.Time) error {
	if s.down.Load() {
		return errRefused
	}
	return s.Store.Complete(ctx, key, token, resp, now, expires)
}

// TestLeaseHeldWhileTheResultIsStored: the store goes down just as the effect returns, for
// less than the lease. The engine keeps trying to store the result, and its lease must not
// lapse meanwhile: another process trying the key all along never takes it over (which would
// run the effect a second time), and the result is stored once the store is back.
func TestLeaseHeldWhileTheResultIsStored(t *testing.T) {
	t.Parallel()
	const (
		lease = 2 * time.Second
		beat  = 600 * time.Millisecond
		// Down past the completion attempt at 1270ms (its retries back off 10ms, 20ms, …
		// 640ms), so the next comes after the lease, at 2270ms; with the heartbeat on, a
		// renewal has 700ms to land once the store is back, room for a loaded machine.
		down = 1300 * time.Millisecond
	)
	st := &downStore{outageStore{Store: memstore.New()}}
	eng, err := idem.New(st, idem.Options{Lease: lease, Heartbeat: beat, StoreTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fp := idem.Fingerprint([]byte("settle"))
	var takeovers atomic.Int64
	done := make(chan error, 1)
	go func() {
		_, err := eng.Do(context.Background(), "k", fp, func(context.Context) (idem.Response, error) {
			st.down.Store(true)
			time.AfterFunc(down, func() { st.down.Store(false) })
			return idem.Response{Status: 201, Body: []byte("once")}, nil
		})
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if n := takeovers.Load(); n != 0 {
				t.Fatalf("the key was taken over %d times while its result was being stored", n)
			}
			rec, err := st.Store.Get(context.Background(), "k")
			if err != nil || rec.State != idem.StateCompleted || string(rec.Response.Body) != "once" {
				t.Fatalf("record %+v, %v: want completed with the effect's answer", rec, err)
			}
			return
		case <-time.After(5 * time.Millisecond):
		}
		if st.down.Load() {
			continue // the other process cannot reach the store either
		}
		res, err := st.Store.Reserve(context.Background(), idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: lease, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed {
			takeovers.Add(1)
			_ = st.Store.Release(context.Background(), "k", res.Record.Token)
		}
	}
}
