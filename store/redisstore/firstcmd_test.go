package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// names is a go-redis hook that records the name of every command sent.
type names struct {
	mu   sync.Mutex
	list []string
}

func (n *names) DialHook(next redis.DialHook) redis.DialHook { return next }
func (n *names) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		n.mu.Lock()
		n.list = append(n.list, cmd.Name())
		n.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (n *names) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (n *names) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.list
	n.list = nil
	return l
}

// A store whose Reserves mostly find a record starts them with a plain GET, so a replay costs
// one GET and no script; once most find no record, it starts them with the claim script again.
func TestReadFirstFollowsTheMix(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: standalone(t).(*redis.Client).Options().Addr})
	t.Cleanup(func() { rdb.Close() })
	var cmds names
	rdb.AddHook(&cmds)
	st := newStore(t, rdb)
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("mix"))
	now := time.Now()
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "done", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatal(err, res.Claimed)
	}
	if err := st.Complete(ctx, "done", res.Record.Token, idem.Response{Status: 201}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if redisstore.ReadsFirst(st) {
		t.Fatal("a fresh store reads first")
	}
	replay := func() {
		t.Helper()
		r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "done", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
		if err != nil || r.Claimed || r.Record.Response == nil || r.Record.Response.Status != 201 {
			t.Fatalf("replay = %+v, %v", r, err)
		}
	}
	n := 0
	for ; !redisstore.ReadsFirst(st); n++ {
		if n == 10 {
			t.Fatal("still starting with the claim script after 10 replays")
		}
		replay()
	}
	cmds.take()
	replay()
	if got := cmds.take(); len(got) != 1 || got[0] != "get" {
		t.Errorf("a replay on a store that reads first sent %v, want one get", got)
	}
	// Mostly new keys: back to the claim script.
	for i := 0; redisstore.ReadsFirst(st); i++ {
		if i == 1000 {
			t.Fatal("still reading first after 1000 new keys")
		}
		if r, err := st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprint("new-", i), Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil || !r.Claimed {
			t.Fatalf("new key: %+v, %v", r, err)
		}
	}
	cmds.take()
	if r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "one-more", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil || !r.Claimed {
		t.Fatalf("new key: %+v, %v", r, err)
	}
	if got := cmds.take(); len(got) != 1 || got[0] != "evalsha" {
		t.Errorf("a new key on a store back to the claim script sent %v, want one evalsha", got)
	}
	// A mix of 3 replays to 1 new key (75 % found) keeps reading first; 1 to 1 does not.
	for _, tc := range []struct {
		replays int
		want    bool
	}{{3, true}, {1, false}} {
		for i := range 400 {
			if i%(tc.replays+1) == 0 {
				if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprintf("mix-%d-%d", tc.replays, i), Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil {
					t.Fatal(err)
				}
			} else {
				replay()
			}
		}
		if got := redisstore.ReadsFirst(st); got != tc.want {
			t.Errorf("after 400 calls of %d replays to a new key, reads first = %v, want %v", tc.replays, got, tc.want)
		}
	}
}

// Many callers of a store that reads first race for a stale lease, each having read it as
// claimable: exactly one takes it over, and the others get its new claim as the record.
func TestReadFirstTakeoverRace(t *testing.T) {
	t.Parallel()
	for name, rdb := range map[string]redis.UniversalClient{"standalone": standalone(t), "cluster": cluster(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t, rdb)
			redisstore.PinReadFirst(st, true)
			ctx := context.Background()
			fp := idem.Fingerprint([]byte("race"))
			for round := range 20 {
				key := fmt.Sprint("k", round)
				start := time.Now()
				first, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: start, Lease: time.Millisecond, TTL: time.Hour})
				if err != nil || !first.Claimed {
					t.Fatal(err, first.Claimed)
				}
				later := start.Add(time.Second) // the lease ran out
				var wins, takeovers atomic.Int32
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						r, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: later, Lease: time.Minute, TTL: time.Hour})
						switch {
						case err != nil:
							t.Error(err)
						case r.Claimed:
							wins.Add(1)
							if r.Takeover {
								takeovers.Add(1)
							}
							if r.Record.Token <= first.Record.Token {
								t.Errorf("takeover token %d not above %d", r.Record.Token, first.Record.Token)
							}
						case r.Record.State != idem.StateInProgress || !r.Record.LeaseUntil.After(later):
							t.Errorf("a loser got %+v, want the winner's claim", r.Record)
						}
					})
				}
				wg.Wait()
				if wins.Load() != 1 || takeovers.Load() != 1 {
					t.Fatalf("round %d: %d claims (%d takeovers), want exactly one takeover", round, wins.Load(), takeovers.Load())
				}
				if err := st.Complete(ctx, key, first.Record.Token, idem.Response{Status: 200}, later, later.Add(time.Hour)); err != idem.ErrLeaseLost {
					t.Fatalf("the old holder's Complete after the takeover = %v, want ErrLeaseLost", err)
				}
			}
		})
	}
}

// Every claim is listed, whichever script wrote it: a claim that was never completed (its
// holder gone right after claiming), and a takeover or a fresh claim of a record that has no
// index member (one written before the store kept an index).
func TestEveryClaimListed(t *testing.T) {
	t.Parallel()
	for _, readFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("readFirst=", readFirst), func(t *testing.T) {
			t.Parallel()
			rdb := standalone(t)
			st := newStore(t, rdb)
			redisstore.PinReadFirst(st, readFirst)
			ctx := context.Background()
			fp := idem.Fingerprint([]byte("listed"))
			now := time.Now()
			listed := func(key string, want idem.State) {
				t.Helper()
				page, err := st.List(ctx, idem.ListQuery{Prefix: key})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range page.Records {
					if r.Key == key && r.State == want {
						return
					}
				}
				t.Errorf("List(%q) = %+v; want it %v", key, page.Records, want)
			}
			unindex := func(key string) {
				t.Helper()
				if err := rdb.ZRem(ctx, redisstore.IndexKey(st, key), key).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "crashed", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil || !r.Claimed {
				t.Fatal(r, err)
			}
			listed("crashed", idem.StateInProgress)

			r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "stale", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !r.Claimed {
				t.Fatal(r, err)
			}
			unindex("stale")
			if r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "stale", Fingerprint: fp, Now: now.Add(2 * time.Minute), Lease: time.Minute, TTL: time.Hour}); err != nil || !r.Takeover {
				t.Fatalf("takeover = %+v, %v", r, err)
			}
			listed("stale", idem.StateInProgress)

			r, err = st.Reserve(ctx, idem.ReserveRequest{Key: "released", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			if err != nil || !r.Claimed {
				t.Fatal(r, err)
			}
			if err := st.Release(ctx, "released", r.Record.Token); err != nil {
				t.Fatal(err)
			}
			unindex("released")
			if r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "released", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil || !r.Claimed {
				t.Fatalf("claim after release = %+v, %v", r, err)
			}
			listed("released", idem.StateInProgress)
		})
	}
}
