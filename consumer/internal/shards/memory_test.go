package shards_test

import (
	"testing"

	"github.com/idemkit/idem/consumer/internal/shards"
	"github.com/idemkit/idem/consumer/internal/shards/shardstest"
)

func TestMemoryCheckpointsConformance(t *testing.T) {
	shardstest.Run(t, func(*testing.T) shards.Checkpoints { return shards.NewMemoryCheckpoints() })
}
