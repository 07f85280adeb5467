package idem_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// failingExtendStore is a memstore whose Extend fails (without ErrLeaseLost) while down is
// set, as a store that answers errors or times out does, while claims by other processes
// still reach it (a partition between this process and the store, healed for the others).
type failingExtendStore struct {
	*memstore.Store
	down atomic.Bool
	hang atomic.Bool // hang until the call's deadline instead of failing at once
}

var errStoreGone = errors.New("store unreachable")

func (s *failingExtendStore) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if s.down.Load() {
		if s.hang.Load() {
			<-ctx.Done()
			return ctx.Err()
		}
		return errStoreGone
	}
	return s.Store.Extend(ctx, key, token, until)
}

// TestLeaseLapseCancelsEffect: the store stops answering this process's extensions for longer
// than the lease while its effect runs, and another process (whose clock runs a little ahead)
// claims the key as soon as the store lets it. The effect's context must be cancelled with
// ErrLeaseLost before the other process can take the key over, so that a handler that stops
// on its context never runs its effect beside the new holder's. With extensions that fail at
// once and with extensions that hang.
func TestLeaseLapseCancelsEffect(t *testing.T) {
	t.Parallel()
	for _, hang := range []bool{false, true} {
		name := map[bool]string{false: "failing", true: "hanging"}[hang]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for i := 0; i < 3; i++ {
				leaseLapseOnce(t, hang)
			}
		})
	}
}

func leaseLapseOnce(t *testing.T, hang bool) {
	const (
		lease = 1200 * time.Millisecond
		beat  = 400 * time.Millisecond // the claim is given up a quarter of it (100ms) early
		ahead = 10 * time.Millisecond
		// noise is how late a goroutine may run on a loaded machine; the 90ms between the
		// cancellation and the other process's first chance stay well above it.
		noise = 30 * time.Millisecond
	)
	st := &failingExtendStore{Store: memstore.New()}
	st.hang.Store(hang)
	eng, err := idem.New(st, idem.Options{Lease: lease, Heartbeat: beat, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	fp := idem.Fingerprint([]byte("lapse"))
	var cancelledAt, takenAt atomic.Int64
	var cause atomic.Value
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		_, err := eng.Do(context.Background(), "k", fp, func(ctx context.Context) (idem.Response, error) {
			close(started)
			time.Sleep(beat + beat/4) // one extension lands, then the store goes away
			st.down.Store(true)
			select {
			case <-ctx.Done():
				cancelledAt.Store(time.Now().UnixNano())
				cause.Store(context.Cause(ctx))
				return idem.Response{}, ctx.Err()
			case <-time.After(5 * lease):
				return idem.Response{Status: 201}, nil
			}
		})
		done <- err
	}()
	<-started
	for takenAt.Load() == 0 {
		time.Sleep(2 * time.Millisecond)
		res, err := st.Reserve(context.Background(), "k", fp, time.Now().Add(ahead), lease, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed {
			takenAt.Store(time.Now().UnixNano())
		}
	}
	err = <-done
	c, _ := cause.Load().(error)
	switch {
	case cancelledAt.Load() == 0:
		t.Fatalf("the effect ran on after its lease lapsed and the key was taken over (Do: %v)", err)
	case !errors.Is(c, idem.ErrLeaseLost):
		t.Fatalf("the effect's context was cancelled with cause %v, want ErrLeaseLost", c)
	case cancelledAt.Load() > takenAt.Load()+int64(noise):
		t.Fatalf("the effect was cancelled %v after another process took the key over", time.Duration(cancelledAt.Load()-takenAt.Load()))
	}
	if !errors.Is(err, idem.ErrLeaseLost) && !errors.Is(err, context.Canceled) {
		t.Errorf("Do returned %v", err)
	}
}
