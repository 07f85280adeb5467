package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// counter is a go-redis hook that counts round trips: one per command, one per pipeline.
type counter struct{ n atomic.Int64 }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestRoundTrips counts the commands each operation sends: one each, and a replay through the
// engine is exactly one, whichever command Reserve starts with. The exceptions are counted
// too: a Reserve that meets a released, expired or stale record it may claim costs two, and so
// does a Reserve of a new key on a store that reads first.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	mkStandalone := func(t *testing.T) redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: standalone(t).(*redis.Client).Options().Addr})
	}
	mkCluster := func(t *testing.T) redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterAddrs(t)})
	}
	type target struct {
		name      string
		mk        func(t *testing.T) redis.UniversalClient
		ap        bool
		readFirst bool
	}
	var targets []target
	for _, readFirst := range []bool{false, true} {
		suffix := ""
		if readFirst {
			suffix = "/ReadFirst"
		}
		targets = append(targets,
			target{"standalone" + suffix, mkStandalone, false, readFirst},
			target{"cluster" + suffix, mkCluster, false, readFirst},
			target{"standalone/AutoPipeline" + suffix, mkStandalone, true, readFirst},
			target{"cluster/AutoPipeline" + suffix, mkCluster, true, readFirst})
	}
	for _, target := range targets {
		t.Run(target.name, func(t *testing.T) {
			t.Parallel()
			rdb := target.mk(t)
			t.Cleanup(func() { rdb.Close() })
			var cnt counter
			rdb.AddHook(&cnt)
			st := newStoreWith(t, redisstore.Options{Client: rdb, AutoPipeline: target.ap})
			redisstore.PinReadFirst(st, target.readFirst)
			newKey := int64(1) // the claim script
			if target.readFirst {
				newKey = 2 // a GET that finds nothing, then the claim script
			}
			ctx := context.Background()
			now := time.Now()
			fp := idem.Fingerprint([]byte("rt"))
			// Warm up: load every script on every node (EVALSHA falls back to EVAL once per
			// node; a fresh server has none: the claim of a released key runs the reserve
			// script) and the slot map. 64 keys spread over
			// the shards reach every node of a small cluster.
			for i := range 64 {
				wk := fmt.Sprintf("warm-%d", i)
				w, err := st.Reserve(ctx, idem.ReserveRequest{Key: wk, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				_ = st.Extend(ctx, wk, w.Record.Token, now.Add(2*time.Minute))
				_ = st.Release(ctx, wk, w.Record.Token)
				if w, err = st.Reserve(ctx, idem.ReserveRequest{Key: wk, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil || !w.Claimed { // the reserve script
					t.Fatal("warm-up claim of a released key:", err, w.Claimed)
				}
				_ = st.Complete(ctx, wk, w.Record.Token, idem.Response{Status: 200}, now, now.Add(time.Hour))
				_ = st.Delete(ctx, wk)
			}

			rt := func(what string, want int64, fn func() error) {
				t.Helper()
				before := cnt.n.Load()
				if err := fn(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if got := cnt.n.Load() - before; got != want {
					t.Errorf("%s took %d round trips, want %d", what, got, want)
				}
			}
			var res idem.Reservation
			rt("Reserve of a new key", newKey, func() (err error) {
				res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
				return err
			})
			tok := res.Record.Token
			rt("Reserve of an in-flight key", 1, func() error {
				_, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
				return err
			})
			rt("Extend", 1, func() error { return st.Extend(ctx, "k", tok, now.Add(2*time.Minute)) })
			rt("Complete", 1, func() error {
				return st.Complete(ctx, "k", tok, idem.Response{Status: 201, Body: []byte("x")}, now, now.Add(time.Hour))
			})
			rt("Reserve of a completed key (replay)", 1, func() error {
				_, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
				return err
			})
			rt("Get", 1, func() error { _, err := st.Get(ctx, "k"); return err })
			res, _ = st.Reserve(ctx, idem.ReserveRequest{Key: "r", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
			rt("Release", 1, func() error { return st.Release(ctx, "r", res.Record.Token) })
			// The documented exceptions: a Reserve whose first command meets a record it may
			// claim runs the reserve script too.
			rt("Reserve after a Release", 2, func() (err error) {
				res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "r", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
				if err == nil && !res.Claimed {
					err = errors.New("not claimed")
				}
				return err
			})
			rt("Reserve taking over a stale lease", 2, func() (err error) {
				res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "r", Fingerprint: fp, Now: now.Add(2 * time.Minute), Lease: time.Minute, TTL: time.Hour})
				if err == nil && !res.Takeover {
					err = errors.New("not taken over")
				}
				return err
			})
			rt("Reserve of an expired key", 2, func() (err error) {
				res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now.Add(2 * time.Hour), Lease: time.Minute, TTL: time.Hour})
				if err == nil && (!res.Claimed || res.Takeover) {
					err = errors.New("not claimed afresh")
				}
				return err
			})
			rt("Delete", 1, func() error { return st.Delete(ctx, "r") })

			// Through the engine: a new key is reserve + complete, a replay one round trip.
			eng, err := idem.New(st, idem.Options{Heartbeat: -1})
			if err != nil {
				t.Fatal(err)
			}
			do := func() error {
				_, err := eng.Do(ctx, "e", fp, func(context.Context) (idem.Response, error) {
					return idem.Response{Status: 200, Body: []byte("once")}, nil
				})
				return err
			}
			rt("engine, new key", newKey+1, do)
			for range 5 {
				rt("engine, replay", 1, do)
			}
		})
	}
}

// lossyProxy forwards TCP to a Redis server and can drop the connection right after the
// server answered, before the answer reaches the client: a lost reply.
type lossyProxy struct {
	ln       net.Listener
	target   string
	dropNext atomic.Bool
	dropped  atomic.Int32
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func newLossyProxy(t *testing.T, target string) *lossyProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, target: target}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *lossyProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() {
			_, _ = io.Copy(s, c)
			s.Close()
		})
		p.wg.Go(func() {
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					if p.dropNext.CompareAndSwap(true, false) {
						p.dropped.Add(1)
						s.Close()
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// TestLostReply: the server ran the script but its reply was lost, so go-redis retried the
// command on a new connection. The retry answers as the first run did: the claim is the
// caller's (not a 409 against itself), and the completion succeeded (not ErrLeaseLost).
func TestLostReply(t *testing.T) {
	t.Parallel()
	addr := standalone(t).(*redis.Client).Options().Addr
	p := newLossyProxy(t, addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), PoolSize: 1, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	st := newStore(t, rdb)
	ctx := context.Background()
	now := time.Now()
	fp := idem.Fingerprint([]byte("lost"))
	if err := rdb.Ping(ctx).Err(); err != nil { // a warm connection, scripts loaded below
		t.Fatal(err)
	}
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "warm", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}

	p.dropNext.Store(true)
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed || res.Takeover || res.Record.Attempts != 1 {
		t.Fatalf("Reserve whose first reply was lost: %+v, %v; want the claim", res, err)
	}
	if p.dropped.Load() != 1 {
		t.Fatalf("the proxy dropped %d replies, want 1", p.dropped.Load())
	}
	rec, err := st.Get(ctx, "k")
	if err != nil || rec.Token != res.Record.Token || rec.State != idem.StateInProgress {
		t.Fatalf("stored record %+v, %v; want the claim with token %d", rec, err, res.Record.Token)
	}

	p.dropNext.Store(true)
	if err := st.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 201}, now, now.Add(time.Hour)); err != nil {
		t.Fatalf("Complete whose first reply was lost: %v, want nil", err)
	}
	// A second, distinct Complete by the same holder is still fenced.
	if err := st.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 500}, now, now.Add(time.Hour)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("second Complete: %v, want ErrLeaseLost", err)
	}

	r2, _ := st.Reserve(ctx, idem.ReserveRequest{Key: "r", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	p.dropNext.Store(true)
	if err := st.Release(ctx, "r", r2.Record.Token); err != nil {
		t.Fatalf("Release whose first reply was lost: %v, want nil", err)
	}
	if err := st.Release(ctx, "r", r2.Record.Token); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("second Release: %v, want ErrLeaseLost", err)
	}
	// A claim of the released key (SET … NX GET meets the released record, then the reserve
	// script) whose first reply is lost.
	p.dropNext.Store(true)
	r3, err := st.Reserve(ctx, idem.ReserveRequest{Key: "r", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !r3.Claimed || r3.Takeover || r3.Record.Token <= r2.Record.Token {
		t.Fatalf("Reserve of a released key whose first reply was lost: %+v, %v; want a new claim", r3, err)
	}
	if p.dropped.Load() != 4 {
		t.Fatalf("the proxy dropped %d replies, want 4", p.dropped.Load())
	}
}

// TestOptions checks validation and defaults.
func TestOptions(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, tc := range []struct {
		name  string
		opt   redisstore.Options
		field string
	}{
		{"no client", redisstore.Options{}, "Options.Client"},
		{"brace in prefix", redisstore.Options{Client: rdb, Prefix: "a{b"}, "Options.Prefix"},
		{"long prefix", redisstore.Options{Client: rdb, Prefix: string(make([]byte, 300))}, "Options.Prefix"},
		{"negative margin", redisstore.Options{Client: rdb, TTLMargin: -time.Second}, "Options.TTLMargin"},
	} {
		_, err := redisstore.New(tc.opt)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrInvalidInput naming %s", tc.name, err, tc.field)
		}
	}
	st, err := redisstore.New(redisstore.Options{Client: rdb})
	if err != nil {
		t.Fatal(err)
	}
	if o := st.Options(); o.Prefix != "idem:" || o.TTLMargin != 5*time.Minute {
		t.Errorf("defaults: %+v", o)
	}
	ctx := context.Background()
	now := time.Now()
	fp := idem.Fingerprint(nil)
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"empty key", func() error {
			_, err := st.Reserve(ctx, idem.ReserveRequest{Key: "", Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour})
			return err
		}()},
		{"long key", func() error {
			_, err := st.Reserve(ctx, idem.ReserveRequest{Key: string(make([]byte, idem.MaxStorageKeyLen+1)), Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour})
			return err
		}()},
		{"zero lease", func() error {
			_, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: 0, TTL: time.Hour})
			return err
		}()},
		{"zero window", func() error {
			_, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Second, TTL: 0})
			return err
		}()},
		{"empty key get", func() error { _, err := st.Get(ctx, ""); return err }()},
	} {
		if !errors.Is(tc.err, idem.ErrInvalidInput) {
			t.Errorf("%s: %v, want ErrInvalidInput", tc.name, tc.err)
		}
	}
	// An unreachable server is a store error, never a panic or a claim.
	_, err = st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour})
	var se *idem.StoreError
	if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.As(err, &se) || se.Op != "reserve" {
		t.Errorf("Reserve against no server: %v, want an *idem.StoreError matching ErrStoreUnavailable", err)
	}
}

// TestCorruptRecord: a record that is not what the store wrote is an error matching both
// idem.ErrStoreUnavailable and idem.ErrCorruptRecord, never a panic, a claim or a replay.
func TestCorruptRecord(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	st := newStore(t, rdb)
	ctx := context.Background()
	now := time.Now()
	fp := idem.Fingerprint([]byte("c"))
	good := "|1|1|1|1||99999999999999999|op|" + fmt.Sprint(len(fp)) + "|" + fp
	for i, v := range []string{
		"9" + good,
		"2" + good + "\x07junk",
		"2" + good,
		"1|x|1|1|1||99999999999999999|op|64|" + fp,
		"1|1|1|1|1||99999999999999999|op|65|" + fp,
		"1|",
		"x",
	} {
		key := "corrupt-" + string(rune('a'+i))
		if err := rdb.Set(ctx, redisstore.RecordKey(st, key), v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := st.Get(ctx, key)
		if !errors.Is(err, idem.ErrCorruptRecord) || !errors.Is(err, idem.ErrStoreUnavailable) {
			t.Errorf("Get of corrupt record %d: %v, want ErrCorruptRecord and ErrStoreUnavailable", i, err)
		}
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
		if err == nil || res.Claimed || !errors.Is(err, idem.ErrStoreUnavailable) {
			t.Errorf("Reserve of corrupt record %d: %+v, %v; want a store error", i, res, err)
		}
	}
	// Another type under the record's key: WRONGTYPE, a store error.
	if err := rdb.HSet(ctx, redisstore.RecordKey(st, "hash"), "st", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "hash", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("Reserve over a hash key: %v, want a store error", err)
	}
}
