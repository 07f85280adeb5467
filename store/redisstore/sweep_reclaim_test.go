package redisstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/redisstore"
)

// reclaimFirst is a go-redis hook that, in the first pipeline of sweep scripts it sees, has
// the record of the first key claimed again (through another client) just before the
// pipeline runs: the race between Sweep reading expires_at and deleting.
type reclaimFirst struct {
	once    sync.Once
	reclaim func(redisKey string)
}

func (h *reclaimFirst) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *reclaimFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *reclaimFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && strings.HasPrefix(cmds[0].Name(), "eval") {
			if key, ok := cmds[0].Args()[3].(string); ok {
				h.once.Do(func() { h.reclaim(key) })
			}
		}
		return next(ctx, cmds)
	}
}

// TestSweepShortOnlyAtTheEnd: when the first expired candidate of a page is claimed again
// between Sweep's read and its delete, Sweep keeps it and deletes the next candidate instead:
// a call returns fewer than batch only once it has walked the key space, which a paced
// sweeper takes for "caught up".
func TestSweepShortOnlyAtTheEnd(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	plain := standalone(t)
	prefix := "idemtest:reclaim" + time.Now().Format("150405.000000000") + ":"
	other, err := redisstore.New(redisstore.Options{Client: plain, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	hook := &reclaimFirst{reclaim: func(redisKey string) {
		key := redisKey[strings.Index(redisKey, "}r:")+3:]
		if res, err := other.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: idem.Fingerprint(nil), Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil || !res.Claimed {
			t.Errorf("claiming %s again = %+v, %v", key, res, err)
		}
	}}
	hooked := redis.NewClient(&redis.Options{Addr: addr})
	defer hooked.Close()
	hooked.AddHook(hook)
	st, err := redisstore.New(redisstore.Options{Client: hooked, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropPrefix(t, plain, prefix) })
	for _, k := range []string{"a", "b", "c"} {
		if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: idem.Fingerprint(nil), Now: now.Add(-time.Hour), Lease: time.Second, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := st.Sweep(ctx, now, 2)
	if err != nil || n != 2 {
		t.Fatalf("Sweep(batch 2) with 3 expired records, one claimed again meanwhile = %d, %v; want 2", n, err)
	}
	left := 0
	for _, k := range []string{"a", "b", "c"} {
		rec, err := st.Get(ctx, k)
		if err == nil && rec.ExpiresAt.After(now) {
			left++
		}
	}
	if left != 1 {
		t.Errorf("%d records claimed again are left, want 1", left)
	}
}
