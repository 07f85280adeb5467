package idem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/syncbuf"
	"github.com/idemkit/idem/store/memstore"
)

// The heartbeat lives as long as the effect runs, not as long as its caller waits: a caller
// that gives up (an HTTP client that disconnects while a detached upstream call goes on) must
// not let the lease lapse under an effect still running, or a retry would run it twice.
func TestHeartbeatOutlivesCaller(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	const lease = 300 * time.Millisecond
	a, _ := idem.New(st, idem.Options{Lease: lease, Heartbeat: lease / 6, Logger: quiet})
	other, _ := idem.New(st, idem.Options{Lease: lease, Logger: quiet})
	ctx, cancel := context.WithCancel(context.Background())
	var runs atomic.Int32
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := a.Do(ctx, "detached", fp1, func(context.Context) (idem.Response, error) {
			runs.Add(1)
			close(started)
			time.Sleep(4 * lease) // goes on whatever the caller does, as a detached call does
			return idem.Response{Status: 201, Body: []byte("first")}, nil
		})
		done <- err
	}()
	<-started
	cancel() // the caller goes away at once
	for deadline := time.Now().Add(3 * lease); time.Now().Before(deadline); time.Sleep(lease / 4) {
		if _, err := other.Do(context.Background(), "detached", fp1, effect(&runs, 201, "second")); !errors.Is(err, idem.ErrInFlight) {
			t.Fatalf("while the effect runs: %v, want ErrInFlight (runs %d)", err, runs.Load())
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("first Do: %v", err)
	}
	res, err := other.Do(context.Background(), "detached", fp1, effect(&runs, 201, "second"))
	if err != nil || !res.Replayed || string(res.Response.Body) != "first" || runs.Load() != 1 {
		t.Fatalf("after the effect: %+v, %v, runs %d; want the first response replayed, 1 run", res, err, runs.Load())
	}
}

func TestHeartbeatKeepsLongWork(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	a, _ := idem.New(st, idem.Options{Lease: 150 * time.Millisecond, Heartbeat: 30 * time.Millisecond})
	other, _ := idem.New(st, idem.Options{Lease: 150 * time.Millisecond})
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := a.Do(context.Background(), "long", fp1, func(ctx context.Context) (idem.Response, error) {
			close(started)
			select {
			case <-finish: // the work lasts until the other process has tried 8 times
			case <-ctx.Done():
				return idem.Response{}, context.Cause(ctx)
			}
			return idem.Response{Status: 200}, nil
		})
		done <- err
	}()
	<-started
	for range 8 {
		time.Sleep(50 * time.Millisecond)
		var runs atomic.Int32
		if _, err := other.Do(context.Background(), "long", fp1, effect(&runs, 200, "")); !errors.Is(err, idem.ErrInFlight) {
			close(finish)
			t.Fatalf("long work was taken over: %v (runs %d)", err, runs.Load())
		}
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// extendSpy records Extend calls that do not belong to a claim running now.
type extendSpy struct {
	idem.Store
	mu      sync.Mutex
	active  map[string]int64 // key → token of the execution running now
	extends int
	wrong   []string
}

// Reserve marks a claim active from the moment it is made: the heartbeat may fire before the
// effect does anything.
func (s *extendSpy) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	res, err := s.Store.Reserve(ctx, req)
	if err == nil && res.Claimed {
		s.mu.Lock()
		s.active[req.Key] = res.Record.Token
		s.mu.Unlock()
	}
	return res, err
}

func (s *extendSpy) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	s.mu.Lock()
	s.extends++
	if tok, ok := s.active[key]; !ok || tok != token {
		s.wrong = append(s.wrong, fmt.Sprintf("Extend(%s, %d) with active token %d (%t)", key, token, tok, ok))
	}
	s.mu.Unlock()
	return s.Store.Extend(ctx, key, token, until)
}

// Heartbeat timers are reused from one execution to the next: an extension must only ever
// reach the claim running now, with its own token, never a finished one.
func TestHeartbeatsReusedSafely(t *testing.T) {
	t.Parallel()
	spy := &extendSpy{Store: memstore.New(), active: map[string]int64{}}
	eng, err := idem.New(spy, idem.Options{Lease: 60 * time.Millisecond, Heartbeat: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				key := fmt.Sprintf("g%d-%d", g, i)
				_, err := eng.Do(context.Background(), key, fp1, func(ctx context.Context) (idem.Response, error) {
					time.Sleep(time.Duration(i%4) * 4 * time.Millisecond)
					return idem.Response{Status: 200}, nil
				})
				spy.mu.Lock()
				delete(spy.active, key) // Do returns only after its heartbeat stopped
				spy.mu.Unlock()
				if err != nil {
					t.Errorf("Do(%s): %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if len(spy.wrong) > 0 {
		t.Fatalf("%d stray extensions, first: %s", len(spy.wrong), spy.wrong[0])
	}
	if spy.extends == 0 {
		t.Fatal("no heartbeat ran: the test proves nothing")
	}
	t.Logf("%d extensions, all to the running claim", spy.extends)
}

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
