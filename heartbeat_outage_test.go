package idem_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/syncbuf"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// outageStore is a memstore whose Extend hangs until its context ends while down is set, as a
// store that stopped answering does.
type outageStore struct {
	*memstore.Store
	down atomic.Bool
}

func (s *outageStore) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if s.down.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Extend(ctx, key, token, until)
}

// TestHeartbeatRidesOutShortOutage checks that a store outage shorter than the lease does not
// let a running effect's lease lapse: a failed extension is tried again soon, not a whole
// heartbeat later. Another process keeps trying to claim the key; it must never take over.
func TestHeartbeatRidesOutShortOutage(t *testing.T) {
	t.Parallel()
	const (
		lease = 900 * time.Millisecond
		beat  = 300 * time.Millisecond
	)
	st := &outageStore{Store: memstore.New()}
	// This process's clock runs 30ms behind the other's, as clocks of two machines may.
	behind := func() time.Time { return time.Now().Add(-30 * time.Millisecond) }
	var logs syncbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	eng, err := idem.New(st, idem.Options{Lease: lease, Heartbeat: beat, Now: behind, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	fp := idem.Fingerprint([]byte("slow"))
	var takeovers atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := eng.Do(context.Background(), "k", fp, func(ctx context.Context) (idem.Response, error) {
			// Down from just after the first extension for 600ms, well within the lease: the
			// extension due then hangs until its timeout.
			time.Sleep(beat + beat/6)
			st.down.Store(true)
			time.Sleep(600 * time.Millisecond)
			st.down.Store(false)
			time.Sleep(3 * lease) // the effect runs on, well past the lease
			return idem.Response{Status: 201}, nil
		})
		if err != nil {
			t.Errorf("effect: %v", err)
		}
	}()
	// Another process, sharing the store, tries to claim the key all along.
	for {
		select {
		case <-done:
			if n := takeovers.Load(); n != 0 {
				t.Fatalf("the key was taken over %d times while its effect ran", n)
			}
			// The operator sees the outage once, and its end, not a line per attempt.
			out := logs.String()
			if n := strings.Count(out, "lease extension failed"); n != 1 {
				t.Errorf("%d warnings of a failed extension, want 1:\n%s", n, out)
			}
			if n := strings.Count(out, "lease extended after failed attempts"); n != 1 {
				t.Errorf("%d notes of the extension after the outage, want 1:\n%s", n, out)
			}
			return
		case <-time.After(5 * time.Millisecond):
		}
		res, err := st.Reserve(context.Background(), "k", fp, time.Now(), lease, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed {
			takeovers.Add(1)
			_ = st.Release(context.Background(), "k", res.Record.Token)
		}
	}
}
