package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/redisstore"
)

// Shared clients, one per target, closed in TestMain before the leak check.
var (
	clientsMu sync.Mutex
	clients   = map[string]redis.UniversalClient{}
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the fault tests cause thousands on purpose.
	redis.SetLogger(quietLogger{})
	code := m.Run()
	clientsMu.Lock()
	for _, c := range clients {
		_ = c.Close()
	}
	clientsMu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// standalone returns the shared client of IDEM_REDIS_ADDR (default 127.0.0.1:6379).
func standalone(t testing.TB) redis.UniversalClient {
	addr := testenv.RedisAddr(t)
	return shared("standalone", func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	})
}

// clusterAddrs returns IDEM_REDIS_CLUSTER_ADDRS (default 127.0.0.1:7001,…7003), checking
// that the first node answers.
func clusterAddrs(t testing.TB) []string {
	v := testenv.Service(t, "Redis Cluster", "IDEM_REDIS_CLUSTER_ADDRS",
		"127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003", func(v string) string { return strings.Split(v, ",")[0] })
	return strings.Split(v, ",")
}

// cluster returns the shared client of the test cluster.
func cluster(t testing.TB) redis.UniversalClient {
	addrs := clusterAddrs(t)
	return shared("cluster", func() redis.UniversalClient {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: 64})
	})
}

func shared(name string, mk func() redis.UniversalClient) redis.UniversalClient {
	clientsMu.Lock()
	defer clientsMu.Unlock()
	c, ok := clients[name]
	if !ok {
		c = mk()
		clients[name] = c
	}
	return c
}

// newStore returns a store on rdb with a fresh prefix whose keys are deleted after the test.
func newStore(t testing.TB, rdb redis.UniversalClient) *redisstore.Store {
	t.Helper()
	return newStoreWith(t, redisstore.Options{Client: rdb})
}

// newStoreWith returns a store with opt and a prefix of its own, deleted at the end of the test.
func newStoreWith(t testing.TB, opt redisstore.Options) *redisstore.Store {
	t.Helper()
	rdb := opt.Client
	prefix := fmt.Sprintf("idemtest:%08x:", rand.Uint32())
	opt.Prefix = prefix
	st, err := redisstore.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropPrefix(t, rdb, prefix) })
	return st
}

// dropPrefix deletes every key that starts with prefix, on every master.
func dropPrefix(t testing.TB, rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	drop := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Unlink(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, drop)
	case *redis.Client:
		err = drop(ctx, c)
	}
	if err != nil {
		t.Logf("cleanup of %s*: %v", prefix, err)
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// withAndWithoutAutoPipeline runs test as two parallel subtests, AutoPipeline=false and true.
func withAndWithoutAutoPipeline(t *testing.T, test func(t *testing.T, autoPipeline bool)) {
	for _, ap := range []bool{false, true} {
		t.Run(fmt.Sprintf("AutoPipeline=%v", ap), func(t *testing.T) {
			t.Parallel()
			test(t, ap)
		})
	}
}
