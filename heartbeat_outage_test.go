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
	down   atomic.Bool
	failed atomic.Int64 // extensions that failed
}

func (s *outageStore) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if s.down.Load() {
		<-ctx.Done()
		s.failed.Add(1)
		return ctx.Err()
	}
	return s.Store.Extend(ctx, key, token, until)
}

// beatLog is a slog handler that notes, for the heartbeat's two lines, how many extensions
// had failed in the store when each was logged, and the count the renewal line reports.
type beatLog struct {
	slog.Handler
	st                            *outageStore
	warnedAt, renewedAt, reported atomic.Int64
}

func (h *beatLog) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case strings.Contains(r.Message, "lease extension failed"):
		h.warnedAt.Store(h.st.failed.Load())
	case strings.Contains(r.Message, "lease extended after failed attempts"):
		h.renewedAt.Store(h.st.failed.Load())
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "failed" {
				h.reported.Store(a.Value.Int64())
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
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
	beats := &beatLog{Handler: slog.NewTextHandler(&logs, nil), st: st}
	logger := slog.New(beats)
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
			// The warning comes with the first failure, and the note after the last one,
			// counting them all.
			failed := st.failed.Load()
			if w := beats.warnedAt.Load(); w != 1 {
				t.Errorf("the warning was logged after %d failed extensions, want 1:\n%s", w, out)
			}
			if r, n := beats.renewedAt.Load(), beats.reported.Load(); failed < 1 || r != failed || n != failed {
				t.Errorf("the note of the renewal was logged after %d failed extensions and reports %d, want both %d:\n%s", r, n, failed, out)
			}
			return
		case <-time.After(5 * time.Millisecond):
		}
		res, err := st.Reserve(context.Background(), idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: lease, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed {
			takeovers.Add(1)
			_ = st.Release(context.Background(), "k", res.Record.Token)
		}
	}
}
