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

// The same suite with every Reserve starting with a GET, as a store does whose calls mostly
// find a record: the GET must never decide a claim.

func TestConformanceStandaloneReadFirst(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	storetest.Run(t, func(t *testing.T) idem.Store { return newReadFirst(t, redisstore.Options{Client: rdb}) })
}

func TestConformanceClusterReadFirst(t *testing.T) {
	t.Parallel()
	rdb := cluster(t)
	storetest.Run(t, func(t *testing.T) idem.Store { return newReadFirst(t, redisstore.Options{Client: rdb}) })
}

func TestConformanceStandaloneAutoPipelineReadFirst(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	storetest.Run(t, func(t *testing.T) idem.Store {
		return newReadFirst(t, redisstore.Options{Client: rdb, AutoPipeline: true})
	})
}

func newReadFirst(t *testing.T, opt redisstore.Options) *redisstore.Store {
	st := newStoreWith(t, opt)
	redisstore.PinReadFirst(st, true)
	return st
}
