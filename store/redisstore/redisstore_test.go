package redisstore_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storetest"
)

func TestConformanceStandalone(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, rdb) })
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	rdb := cluster(t)
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, rdb) })
}

// The same suite with the store's commands sent through go-redis's automatic pipeliner.

func TestConformanceStandaloneAutoPipeline(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	storetest.Run(t, func(t *testing.T) idem.Store {
		return newStoreWith(t, redisstore.Options{Client: rdb, AutoPipeline: true})
	})
}

func TestConformanceClusterAutoPipeline(t *testing.T) {
	t.Parallel()
	rdb := cluster(t)
	storetest.Run(t, func(t *testing.T) idem.Store {
		return newStoreWith(t, redisstore.Options{Client: rdb, AutoPipeline: true})
	})
}
