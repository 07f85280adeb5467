package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/redisstore"
)

// redisServer is a private redis-server process started by a test.
type redisServer struct {
	t    *testing.T
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startRedis starts redis-server on a free 127.0.0.1 port with its data in a temporary
// directory. The process is killed when the test ends.
func startRedis(t *testing.T, extra ...string) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(t, "redis-server is not installed (Debian: redis-server): %v", err)
	}
	s := &redisServer{t: t, port: freePort(t), dir: t.TempDir(), args: extra}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) start() {
	s.t.Helper()
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--dir", s.dir,
		"--save", "", "--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log")}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", s.addr(), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if i > 100 {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not start: %v\n%s", s.addr(), err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill stops the server at once (SIGKILL), as a crash would.
func (s *redisServer) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// TestRestartUnderLoad kills Redis (SIGKILL) while many goroutines run effects through the
// engine, and starts it again on the same port and data. The server runs with
// appendfsync always, so what it acknowledged survives the crash. Checked: while it is down,
// calls fail with ErrStoreUnavailable (or ErrInFlight for a claim whose holder could not
// finish) and run no effect; no key's effect runs twice; every call that reported
// "executed and kept" is stored, completed, with its response; the same client recovers
// without restarting the process.
//
// With AutoPipeline, go-redis sends again every command of a batch whose connection broke,
// including those Redis had executed: the store must answer those as their first execution.
func TestRestartUnderLoad(t *testing.T) {
	t.Parallel()
	withAndWithoutAutoPipeline(t, testRestartUnderLoad)
}

func testRestartUnderLoad(t *testing.T, autoPipeline bool) {
	srv := startRedis(t, "--appendonly", "yes", "--appendfsync", "always")
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr(), PoolSize: 32,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	st, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: "restart:", AutoPipeline: autoPipeline})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := idem.New(st, idem.Options{Lease: 5 * time.Minute, StoreTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Through the pipeliner, go-redis rides out a short outage by sending a failed batch
	// again: a call waits as long as its context allows, which must be shorter than the
	// outage for some calls to fail.
	callTimeout := 10 * time.Second
	if autoPipeline {
		callTimeout = time.Second
	}
	w := startWorkload(eng, "restart", 3000, 16, callTimeout)
	time.Sleep(500 * time.Millisecond)
	srv.kill()
	time.Sleep(2500 * time.Millisecond) // longer than go-redis's own retries ride out
	srv.start()
	// Recovery: the same client and engine work again, without restarting anything.
	fp := idem.Fingerprint([]byte("restart"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := eng.Do(context.Background(), "after-restart", fp, func(context.Context) (idem.Response, error) {
			return idem.Response{Status: 200}, nil
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery within 10s of the restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // more load after the restart
	ran, kept := w.stopAndCheck(t, st)
	if w.storeErrs.Load() == 0 {
		t.Fatal("no call failed while Redis was down: the test did not test the outage")
	}
	t.Logf("effects %d, executed and kept %d, replays %d, in flight %d, store-unavailable errors %d",
		ran, kept, w.replays.Load(), w.inflight.Load(), w.storeErrs.Load())
}

// clusterNode is a node of a private test cluster.
type clusterNode struct {
	srv *redisServer
	c   *redis.Client
	id  string
}

// startCluster starts a private three-master cluster and waits until it is ok.
func startCluster(t *testing.T) []*clusterNode {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		testenv.Missing(t, "redis-cli is not installed (Debian: redis-tools): %v", err)
	}
	ctx := context.Background()
	var nodes []*clusterNode
	var addrs []string
	for range 3 {
		srv := startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000", "--appendonly", "no")
		c := redis.NewClient(&redis.Options{Addr: srv.addr()})
		t.Cleanup(func() { c.Close() })
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &clusterNode{srv: srv, c: c, id: id})
		addrs = append(addrs, srv.addr())
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for i := 0; ; i++ {
		ok := true
		for _, n := range nodes {
			info, _ := n.c.ClusterInfo(ctx).Result()
			ok = ok && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3")
		}
		if ok {
			return nodes
		}
		if i > 200 {
			t.Fatal("the private cluster did not reach cluster_state:ok")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// migrateSlot moves slot from src to dst the way redis-cli --cluster reshard does: mark it
// importing and migrating, MIGRATE its keys one at a time (so a script can find its record
// and index on different nodes and get TRYAGAIN or ASK), then assign it to dst everywhere.
func migrateSlot(ctx context.Context, nodes []*clusterNode, slot int, src, dst *clusterNode) error {
	if err := dst.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err(); err != nil {
		return fmt.Errorf("importing: %w", err)
	}
	if err := src.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err(); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	host, port, _ := net.SplitHostPort(dst.srv.addr())
	for {
		keys, err := src.c.ClusterGetKeysInSlot(ctx, slot, 1).Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		if err := src.c.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", keys[0]).Err(); err != nil {
			return fmt.Errorf("migrate %q: %w", keys[0], err)
		}
		time.Sleep(time.Millisecond) // leave the slot split for a moment
	}
	for _, n := range append([]*clusterNode{dst, src}, nodes...) {
		if err := n.c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
			return fmt.Errorf("setslot node: %w", err)
		}
	}
	return nil
}

// TestSlotMigrationUnderLoad moves the slots that hold a workload's keys from node to node,
// key by key, while goroutines race to claim those keys, complete them and replay them. Each
// key has exactly one winner and its completed record is readable wherever it moved; errors,
// if go-redis runs out of redirects, are store errors (fail closed), never a second claim.
func TestSlotMigrationUnderLoad(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.srv.addr())
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRedirects: 16, PoolSize: 32})
	t.Cleanup(func() { rdb.Close() })
	st, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: "mig:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The workload's keys all fall in a few shards, whose slots the migrator moves.
	shards := map[int]bool{}
	for len(shards) < 4 {
		shards[rand.IntN(redisstore.Shards)] = true
	}
	var slots []int
	for sh := range shards {
		slot, err := rdb.ClusterKeySlot(ctx, "mig:"+redisstore.Tag(sh)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, int(slot))
	}
	var keys []string
	for i := 0; len(keys) < 120; i++ {
		if k := "k-" + strconv.Itoa(i); shards[redisstore.Shard(k)] {
			keys = append(keys, k)
		}
	}

	// slotOwner asks node n which master owns slot.
	slotOwner := func(n *clusterNode, slot int) string {
		cs, err := n.c.ClusterShards(ctx).Result()
		if err != nil {
			return ""
		}
		for _, sh := range cs {
			for _, r := range sh.Slots {
				if int64(slot) >= r.Start && int64(slot) <= r.End {
					for _, nd := range sh.Nodes {
						if nd.Role == "master" {
							return nd.ID
						}
					}
				}
			}
		}
		return ""
	}
	owner := map[int]*clusterNode{}
	for _, slot := range slots {
		id := slotOwner(nodes[0], slot)
		for _, n := range nodes {
			if n.id == id {
				owner[slot] = n
			}
		}
		if owner[slot] == nil {
			t.Fatalf("no owner of slot %d", slot)
		}
	}
	// agree waits until every node says dst owns slot, so the next move starts from a
	// settled cluster (as redis-cli --cluster reshard does between moves).
	agree := func(slot int, dst *clusterNode) error {
		for range 200 {
			ok := true
			for _, n := range nodes {
				ok = ok && slotOwner(n, slot) == dst.id
			}
			if ok {
				return nil
			}
			time.Sleep(10 * time.Millisecond)
		}
		return fmt.Errorf("nodes do not agree that %s owns slot %d", dst.srv.addr(), slot)
	}
	done := make(chan struct{})
	var migrations atomic.Int32
	var migErr error
	var migStopped atomic.Bool
	var mwg sync.WaitGroup
	mwg.Go(func() {
		for {
			for _, slot := range slots {
				select {
				case <-done:
					return
				default:
				}
				src := owner[slot]
				var dst *clusterNode
				for i, n := range nodes {
					if n == src {
						dst = nodes[(i+1)%len(nodes)]
					}
				}
				if err := migrateSlot(ctx, nodes, slot, src, dst); err != nil {
					// The test's own resharding can lose a race with the cluster's gossip on a
					// loaded machine (a node still sees an older owner). Stop moving slots
					// then, leaving the slot mid-migration (clients follow ASK redirects):
					// the store is judged by the claims below, and at least two completed
					// moves are still required.
					t.Logf("migrator stops after %d moves: slot %d: %v", migrations.Load(), slot, err)
					migStopped.Store(true)
					return
				}
				owner[slot] = dst
				if err := agree(slot, dst); err != nil {
					migErr = err
					return
				}
				migrations.Add(1)
			}
		}
	})

	now := time.Now()
	fp := idem.Fingerprint([]byte("mig"))
	var storeErrs atomic.Int64
	for _, k := range keys {
		var wins atomic.Int32
		var winner atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
				switch {
				case err != nil && errors.Is(err, idem.ErrStoreUnavailable):
					if storeErrs.Add(1) <= 5 {
						t.Logf("%s: %v", k, err)
					}
				case err != nil:
					t.Errorf("%s: %v", k, err)
				case res.Claimed:
					wins.Add(1)
					winner.Store(res.Record.Token)
					if err := st.Complete(ctx, k, res.Record.Token, idem.Response{Status: 200, Body: []byte(k)}, now, now.Add(time.Hour)); err != nil {
						if !errors.Is(err, idem.ErrStoreUnavailable) {
							t.Errorf("%s: Complete: %v", k, err)
						}
						storeErrs.Add(1)
						winner.Store(-1) // not completed: the replay check below skips it
					}
				}
			})
		}
		wg.Wait()
		if wins.Load() > 1 {
			t.Fatalf("%s: %d winners", k, wins.Load())
		}
		if wins.Load() == 0 {
			continue // every racer failed (counted above)
		}
		if winner.Load() == -1 {
			continue
		}
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: fp, Now: now.Add(time.Second), Lease: time.Minute, TTL: time.Hour})
		if err != nil {
			storeErrs.Add(1)
			continue
		}
		if res.Claimed || res.Record.State != idem.StateCompleted || res.Record.Token != winner.Load() || string(res.Record.Response.Body) != k {
			t.Errorf("%s: replay %+v", k, res)
		}
	}
	close(done)
	mwg.Wait()
	if migErr != nil {
		t.Fatalf("migrator: %v", migErr)
	}
	if migrations.Load() < 2 {
		t.Fatalf("only %d slot migrations happened during the workload", migrations.Load())
	}
	// After the moves, every key is readable and completed — unless the migrator stopped with
	// the nodes disagreeing about a slot's owner: then the cluster itself answers MOVED in a
	// loop until it heals, and all the store can do is fail closed (checked above: errors,
	// never a second winner or a wrong replay).
	if migStopped.Load() {
		t.Logf("readability after the moves not checked: the test's resharding left the cluster split")
		t.Logf("%d keys, %d slot migrations, %d store errors", len(keys), migrations.Load(), storeErrs.Load())
		return
	}
	for _, k := range keys {
		rec, err := st.Get(ctx, k)
		if err != nil || rec.State != idem.StateCompleted || string(rec.Response.Body) != k {
			t.Errorf("%s after the migrations: %+v, %v", k, rec, err)
		}
	}
	t.Logf("%d keys, %d slot migrations, %d store errors", len(keys), migrations.Load(), storeErrs.Load())
}

// TestFrozenServerCallsEndAtDeadline: a Redis that stops answering (SIGSTOP: connections stay
// open, nothing comes back) must not hold a call past its context's deadline, and the error
// must say the store is unavailable (so no effect runs) and that the deadline passed. Once the
// server answers again, so does the same store. That takes a client with
// ContextTimeoutEnabled (without it go-redis waited for its ReadTimeout, here a minute), or
// AutoPipeline, which waits for the reply no longer than the context allows.
func TestFrozenServerCallsEndAtDeadline(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name                 string
		ctxTimeout, autoPipe bool
	}{{"ContextTimeoutEnabled", true, false}, {"AutoPipeline", false, true}} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			ap := v.autoPipe
			srv := startRedis(t)
			// Read and write timeouts far beyond the calls' deadlines: only the context ends them.
			rdb := redis.NewClient(&redis.Options{Addr: srv.addr(), ReadTimeout: time.Minute, WriteTimeout: time.Minute,
				ContextTimeoutEnabled: v.ctxTimeout})
			t.Cleanup(func() {
				_ = srv.cmd.Process.Signal(syscall.SIGCONT)
				rdb.Close()
			})
			st, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: "frozen:", AutoPipeline: ap})
			if err != nil {
				t.Fatal(err)
			}
			fp := idem.Fingerprint([]byte("frozen"))
			now := time.Now()
			if _, err := st.Reserve(context.Background(), idem.ReserveRequest{Key: "warm", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err != nil {
				t.Fatal(err) // connections open, scripts not needed yet
			}
			if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					defer cancel()
					start := time.Now()
					_, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k-" + strconv.Itoa(i), Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
					took := time.Since(start)
					if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("call %d against a frozen server: %v, want a store error with the deadline", i, err)
					}
					if took > 2*time.Second {
						t.Errorf("call %d took %v, its deadline was 300ms", i, took)
					}
				})
			}
			wg.Wait()
			// Through the engine: fail closed, the effect never runs (invariant 8).
			eng, err := idem.New(st, idem.Options{})
			if err != nil {
				t.Fatal(err)
			}
			dctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			var ran atomic.Bool
			_, err = eng.Do(dctx, "through-engine", fp, func(context.Context) (idem.Response, error) {
				ran.Store(true)
				return idem.Response{Status: 200}, nil
			})
			cancel()
			if ran.Load() || !errors.Is(err, idem.ErrStoreUnavailable) {
				t.Errorf("Engine.Do against a frozen server: effect ran %v, error %v; want no effect and a store error", ran.Load(), err)
			}
			if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: "after", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}); err != nil {
				t.Fatalf("after the server answers again: %v", err)
			}
		})
	}
}
