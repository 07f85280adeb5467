package redisstore_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storetest"
)

// startReplicatedCluster starts a private cluster of one master, which holds every slot, and
// one replica of it, and waits until the replica is in sync.
func startReplicatedCluster(t *testing.T) (master, replica *clusterNode) {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		testenv.Missing(t, "redis-cli is not installed (Debian: redis-tools): %v", err)
	}
	ctx := context.Background()
	var nodes []*clusterNode
	for range 2 {
		srv := startRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000", "--appendonly", "no")
		c := redis.NewClient(&redis.Options{Addr: srv.addr()})
		t.Cleanup(func() { c.Close() })
		id, err := c.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &clusterNode{srv: srv, c: c, id: id})
	}
	master, replica = nodes[0], nodes[1]
	if err := master.c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	if err := replica.c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(master.srv.port)).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replica to learn of the master", func() bool {
		return replica.c.Do(ctx, "CLUSTER", "REPLICATE", master.id).Err() == nil
	})
	waitFor(t, "the replica to be in sync and the cluster ok", func() bool {
		return inSync(ctx, replica) && knowsReplica(ctx, master, replica) && clusterOK(ctx, master) && clusterOK(ctx, replica)
	})
	return master, replica
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	if !waitUntil(30*time.Second, ok) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitUntil polls ok until it holds or d passes, and reports whether it held.
func waitUntil(d time.Duration, ok func() bool) bool {
	for deadline := time.Now().Add(d); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

func clusterOK(ctx context.Context, n *clusterNode) bool {
	info, _ := n.c.ClusterInfo(ctx).Result()
	return strings.Contains(info, "cluster_state:ok")
}

// inSync reports whether n is a replica whose link to its master is up.
func inSync(ctx context.Context, n *clusterNode) bool {
	info, _ := n.c.Info(ctx, "replication").Result()
	return strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
}

// knowsReplica reports whether master's cluster view lists replica as its replica (a manual
// failover that starts before is ignored by the master and times out).
func knowsReplica(ctx context.Context, master, replica *clusterNode) bool {
	lines, _ := master.c.Do(ctx, "CLUSTER", "REPLICAS", master.id).StringSlice()
	for _, l := range lines {
		if strings.HasPrefix(l, replica.id+" ") {
			return true
		}
	}
	return false
}

func isMaster(ctx context.Context, n *clusterNode) bool {
	info, _ := n.c.Info(ctx, "replication").Result()
	return strings.Contains(info, "role:master")
}

// TestFailoverUnderLoad runs effects through the engine on many goroutines while the replica
// takes over from its master with CLUSTER FAILOVER, and then the old master takes back over
// the same way. A manual failover loses no acknowledged write, so: no key's effect runs twice,
// every call that reported "executed and kept" is stored, completed, with its response, errors
// during the switch are store errors or in-flight answers (fail closed), and the same client
// carries on against the new master. Then the conformance suite runs on the failed-over
// cluster. It runs with and without AutoPipeline.
func TestFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	withAndWithoutAutoPipeline(t, testFailoverUnderLoad)
}

func testFailoverUnderLoad(t *testing.T, autoPipeline bool) {
	master, replica := startReplicatedCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{master.srv.addr(), replica.srv.addr()}, PoolSize: 32, MaxRedirects: 8,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	st, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: "failover:", AutoPipeline: autoPipeline})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := idem.New(st, idem.Options{Lease: 5 * time.Minute, StoreTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := startWorkload(eng, "failover", 2000, 16, 10*time.Second)
	ctx := context.Background()
	// failover makes n the master with CLUSTER FAILOVER and waits until the client's calls
	// go through again.
	failover := func(n, old *clusterNode) {
		t.Helper()
		before := w.calls.Load()
		// Redis aborts a manual failover that does not finish within its timeout (5s), which
		// a loaded machine can exceed: ask again then.
		for attempt := 1; ; attempt++ {
			if err := n.c.Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
				t.Fatalf("CLUSTER FAILOVER on %s: %v", n.srv.addr(), err)
			}
			if waitUntil(8*time.Second, func() bool { return isMaster(ctx, n) }) {
				break
			}
			if attempt == 4 {
				t.Fatalf("%s did not become the master after %d CLUSTER FAILOVER", n.srv.addr(), attempt)
			}
			t.Logf("CLUSTER FAILOVER on %s did not finish in 8s; asking again", n.srv.addr())
		}
		waitFor(t, "the old master to follow "+n.srv.addr(), func() bool {
			return inSync(ctx, old) && knowsReplica(ctx, n, old) && clusterOK(ctx, n)
		})
		waitFor(t, "calls after the failover", func() bool { return w.calls.Load() > before+200 })
	}
	time.Sleep(300 * time.Millisecond)
	failover(replica, master)
	time.Sleep(300 * time.Millisecond)
	failover(master, replica)
	time.Sleep(300 * time.Millisecond)
	ran, kept := w.stopAndCheck(t, st)
	if kept == 0 || w.replays.Load() == 0 {
		t.Fatalf("executed and kept %d, replays %d: the workload did not run", kept, w.replays.Load())
	}
	t.Logf("calls %d: effects %d, executed and kept %d, replays %d, in flight %d, store errors %d",
		w.calls.Load(), ran, kept, w.replays.Load(), w.inflight.Load(), w.storeErrs.Load())

	// The cluster after two failovers still passes the whole contract.
	var seq atomic.Int32
	storetest.Run(t, func(t *testing.T) idem.Store {
		st, err := redisstore.New(redisstore.Options{Client: rdb, Prefix: fmt.Sprintf("after%d:", seq.Add(1))})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}
