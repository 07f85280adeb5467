package shards

import (
	"context"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"
)

// ShardEnd is the checkpoint of a shard read to its end (a parent shard after a reshard): its
// children may be read.
const ShardEnd = "SHARD_END"

// Checkpoints keep, per shard, how far a consumer application has read (the sequence number of
// the last record done with, or ShardEnd) and which worker reads it now (a lease), so that the
// workers of one application share the shards and a worker that stops or dies leaves its shards
// to the others once its lease runs out.
//
// A checkpoint only saves work. The effect of each record happens once because the consumer's
// idem store keeps its key; a checkpoint that is lost or behind makes a worker read records
// again, and each of them is then a duplicate (one store round trip), never a second effect.
// So an implementation may keep checkpoints anywhere: NewMemoryCheckpoints keeps them in the
// process (workers of one process share them; a restarted process reads each shard from its
// start, or from Options.Start); for workers in several processes, implement Checkpoints on
// a table they share (a DynamoDB item per shard with a conditional write on the lease, a
// PostgreSQL row per shard).
type Checkpoints interface {
	// Claim takes the lease of the shard for owner until the given time, or renews it,
	// unless another owner holds it and its lease has not run out. It returns the shard's
	// checkpoint ("" for none) and whether owner holds the lease. A time in the past gives
	// the lease up: another owner may claim the shard at once (a worker's Stop does so).
	Claim(ctx context.Context, shard, owner string, until time.Time) (checkpoint string, held bool, err error)
	// Save sets the shard's checkpoint if owner holds its lease, never moving it back (a
	// sequence number lower than the saved one is ignored; ShardEnd is the highest), and
	// reports whether owner held it.
	Save(ctx context.Context, shard, owner, checkpoint string) (held bool, err error)
	// Checkpoint returns the shard's checkpoint ("" for none), whoever holds it.
	Checkpoint(ctx context.Context, shard string) (string, error)
	// Leases returns every shard that has a checkpoint or a lease (held or run out).
	Leases(ctx context.Context) ([]Lease, error)
	// Take takes the lease of the shard for owner until the given time if the owner from
	// holds it now, whether or not its lease has run out (a worker that holds fewer shards
	// than its share takes one from a worker that holds more). It returns the shard's
	// checkpoint and whether owner holds the lease.
	Take(ctx context.Context, shard, from, owner string, until time.Time) (checkpoint string, held bool, err error)
}

// Lease is a shard's entry in Checkpoints: its checkpoint ("" for none), and the worker that
// holds or last held its lease, until when.
type Lease struct {
	Shard      string
	Checkpoint string
	Owner      string
	Until      time.Time
}

// Live reports whether the lease is held at now.
func (l Lease) Live(now time.Time) bool { return l.Owner != "" && now.Before(l.Until) }

// MemoryCheckpoints keep checkpoints and leases in the process's memory. Create them with
// NewMemoryCheckpoints; they are safe for concurrent use.
type MemoryCheckpoints struct {
	mu     sync.Mutex
	shards map[string]*memShard
	now    func() time.Time
}

type memShard struct {
	checkpoint string
	owner      string
	until      time.Time
}

// NewMemoryCheckpoints returns empty checkpoints kept in memory.
func NewMemoryCheckpoints() *MemoryCheckpoints {
	return &MemoryCheckpoints{shards: map[string]*memShard{}, now: time.Now}
}

var _ Checkpoints = (*MemoryCheckpoints)(nil)

func (m *MemoryCheckpoints) shard(id string) *memShard {
	s := m.shards[id]
	if s == nil {
		s = &memShard{}
		m.shards[id] = s
	}
	return s
}

// Claim implements Checkpoints.
func (m *MemoryCheckpoints) Claim(_ context.Context, shard, owner string, until time.Time) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.shard(shard)
	if s.owner != "" && s.owner != owner && m.now().Before(s.until) {
		return s.checkpoint, false, nil
	}
	s.owner, s.until = owner, until
	return s.checkpoint, true, nil
}

// Save implements Checkpoints.
func (m *MemoryCheckpoints) Save(_ context.Context, shard, owner, checkpoint string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.shard(shard)
	if s.owner != owner {
		return false, nil
	}
	if Later(checkpoint, s.checkpoint) {
		s.checkpoint = checkpoint
	}
	return true, nil
}

// Checkpoint implements Checkpoints.
func (m *MemoryCheckpoints) Checkpoint(_ context.Context, shard string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shard(shard).checkpoint, nil
}

// Leases implements Checkpoints.
func (m *MemoryCheckpoints) Leases(context.Context) ([]Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Lease, 0, len(m.shards))
	for id, s := range m.shards {
		out = append(out, Lease{Shard: id, Checkpoint: s.checkpoint, Owner: s.owner, Until: s.until})
	}
	return out, nil
}

// Take implements Checkpoints.
func (m *MemoryCheckpoints) Take(_ context.Context, shard, from, owner string, until time.Time) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.shard(shard)
	if s.owner != from {
		return s.checkpoint, false, nil
	}
	s.owner, s.until = owner, until
	return s.checkpoint, true, nil
}

// Later reports whether checkpoint a is past checkpoint b: ShardEnd is past every sequence
// number, every sequence number is past "" (none), and sequence numbers (decimal, up to 128
// bits) compare as numbers.
func Later(a, b string) bool {
	switch {
	case a == b || b == ShardEnd:
		return false
	case a == ShardEnd || b == "":
		return true
	case a == "":
		return false
	}
	x, okx := new(big.Int).SetString(a, 10)
	y, oky := new(big.Int).SetString(b, 10)
	if !okx || !oky {
		return len(a) > len(b) || (len(a) == len(b) && a > b)
	}
	return x.Cmp(y) > 0
}

// Order is checkpoint in a form whose string order is the order of Later, for a table that
// compares checkpoints in a condition: a sequence number (decimal; Kinesis allows up to 129
// digits) as "n" and 130 digits, ShardEnd as "z", anything else as "m", its length in 8
// digits and itself.
func Order(checkpoint string) string {
	if checkpoint == ShardEnd {
		return "z"
	}
	if n, ok := new(big.Int).SetString(checkpoint, 10); ok && n.Sign() >= 0 && len(n.String()) <= 130 && !strings.HasPrefix(checkpoint, "+") {
		return fmt.Sprintf("n%0130s", n.String())
	}
	return fmt.Sprintf("m%08d%s", len(checkpoint), checkpoint)
}
