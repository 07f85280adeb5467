package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/redisstore"
)

// sweepDeleteHook runs fn once, the first time the client sends a pipeline of scripts
// (Sweep's deletions) while armed.
type sweepDeleteHook struct {
	armed atomic.Bool
	once  sync.Once
	fn    func()
}

func (h *sweepDeleteHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sweepDeleteHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *sweepDeleteHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() {
			for _, c := range cmds {
				if n := c.Name(); n == "eval" || n == "evalsha" {
					h.once.Do(h.fn)
					break
				}
			}
		}
		return next(ctx, cmds)
	}
}

// TestSweepKeepsRecordClaimedAgain: a record that Sweep found expired, then another process
// claimed again before Sweep's deletion reached Redis, is kept: the deletion re-checks
// expires_at in the script, atomically, instead of trusting what the scan read.
func TestSweepKeepsRecordClaimedAgain(t *testing.T) {
	t.Parallel()
	shared := standalone(t)
	other := newStore(t, shared)
	hook := &sweepDeleteHook{}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(hook)
	sweeper, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: redisstore.PrefixOf(other)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	fp := idem.Fingerprint(nil)
	base := time.Now()
	const key = "reclaimed"
	if res, err := other.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: base, Lease: time.Second, TTL: time.Minute}); err != nil || !res.Claimed {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	now := base.Add(2 * time.Minute) // the first claim expired at base+1m
	var again idem.Reservation
	hook.fn = func() {
		again, err = other.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	}
	hook.armed.Store(true)
	n, serr := sweeper.Sweep(ctx, now, 100)
	if serr != nil {
		t.Fatal(serr)
	}
	if err != nil || !again.Claimed {
		t.Fatalf("claim between the scan and the deletion = %+v, %v", again, err)
	}
	rec, err := other.Get(ctx, key)
	if err != nil {
		t.Fatalf("the record claimed again after Sweep read it: %v (Sweep deleted %d)", err, n)
	}
	if rec.Token != again.Record.Token || rec.State != idem.StateInProgress {
		t.Fatalf("record after Sweep = %+v, want the new claim (token %d)", rec, again.Record.Token)
	}
	if n != 0 {
		t.Fatalf("Sweep reported %d deletions, want 0", n)
	}
}
