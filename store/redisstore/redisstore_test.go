package redisstore_test

import (
	"testing"

	"github.com/idemkit/idem"
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
