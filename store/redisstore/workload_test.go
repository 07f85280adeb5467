package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// workload runs effects through an engine on many goroutines, over nkeys keys, until stopped,
// and counts every answer, for the fault tests: a store that misbehaves under it must still
// never run an effect twice nor lose one it reported kept.
type workload struct {
	eng        *idem.Engine
	effects    []atomic.Int32 // per key: effects run
	executed   []atomic.Int32 // per key: calls that reported "executed and kept"
	calls      atomic.Int64
	storeErrs  atomic.Int64
	inflight   atomic.Int64
	replays    atomic.Int64
	mu         sync.Mutex
	unexpected []error
	stop       chan struct{}
	wg         sync.WaitGroup
}

func workloadKey(i int) string { return "key-" + strconv.Itoa(i) }

// startWorkload starts workers goroutines on eng, each calling Do on random keys among nkeys,
// each call with callTimeout.
func startWorkload(eng *idem.Engine, name string, nkeys, workers int, callTimeout time.Duration) *workload {
	w := &workload{eng: eng, effects: make([]atomic.Int32, nkeys), executed: make([]atomic.Int32, nkeys), stop: make(chan struct{})}
	fp := idem.Fingerprint([]byte(name))
	for range workers {
		w.wg.Go(func() {
			for {
				select {
				case <-w.stop:
					return
				default:
				}
				i := rand.IntN(nkeys)
				key := workloadKey(i)
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				res, err := eng.Do(ctx, key, fp, func(context.Context) (idem.Response, error) {
					w.effects[i].Add(1)
					return idem.Response{Status: 201, Body: []byte(key)}, nil
				})
				cancel()
				w.calls.Add(1)
				switch {
				case err == nil && res.Replayed:
					w.replays.Add(1)
					if string(res.Response.Body) != key {
						w.fail(fmt.Errorf("%s replayed %q", key, res.Response.Body))
					}
				case err == nil:
					w.executed[i].Add(1)
				case errors.Is(err, idem.ErrInFlight):
					w.inflight.Add(1)
				case errors.Is(err, idem.ErrStoreUnavailable):
					w.storeErrs.Add(1)
					time.Sleep(5 * time.Millisecond)
				default:
					w.fail(fmt.Errorf("%s: %w", key, err))
				}
			}
		})
	}
	return w
}

func (w *workload) fail(err error) {
	w.mu.Lock()
	w.unexpected = append(w.unexpected, err)
	w.mu.Unlock()
}

// stopAndCheck stops the workers and checks the answers against st: no unexpected error, no
// effect run twice, every "executed and kept" stored, completed, with its response. It
// returns how many effects ran and how many keys were reported kept.
func (w *workload) stopAndCheck(t *testing.T, st idem.Store) (ran, kept int) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	for _, err := range w.unexpected {
		t.Error(err)
	}
	for i := range w.effects {
		key := workloadKey(i)
		n := w.effects[i].Load()
		if n > 1 {
			t.Errorf("%s: effect ran %d times", key, n)
		}
		ran += int(n)
		if w.executed[i].Load() == 0 {
			continue
		}
		kept++
		rec, err := st.Get(context.Background(), key)
		if err != nil || rec.State != idem.StateCompleted || rec.Response == nil || !bytes.Equal(rec.Response.Body, []byte(key)) {
			t.Errorf("%s reported executed and kept, but the store has %+v, %v", key, rec, err)
		}
	}
	return ran, kept
}
