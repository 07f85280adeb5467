package kinesis_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/consumer/kinesis"
)

// takeCounter counts the shards workers take from one another (Take): each one stops a
// reader mid-shard, so a worker that claims past its share costs the others a take.
type takeCounter struct {
	kinesis.Checkpoints
	takes atomic.Int64
}

func (c *takeCounter) Take(ctx context.Context, shard, from, owner string, until time.Time) (string, bool, error) {
	cp, ok, err := c.Checkpoints.Take(ctx, shard, from, owner, until)
	if ok {
		c.takes.Add(1)
	}
	return cp, ok, err
}

// Three workers over six shards end with two each. When one of them stops, the two left each
// claim one of its shards: neither ever holds more than its share (three), so neither takes a
// shard from the other. A worker that claimed every free shard it saw would hold four until
// the other took one back.
func TestWorkersClaimOnlyTheirShare(t *testing.T) {
	t.Parallel()
	client := kinesisClient(t)
	stream := newStream(t, client, 6)
	cps := &takeCounter{Checkpoints: kinesis.NewMemoryCheckpoints()}
	const lease = 3 * time.Second
	eng := engine(t)
	ta := newTally()
	opt := kinesis.Options{Client: client, Stream: stream, Checkpoints: cps, PollInterval: time.Second, LeaseDuration: lease, Logger: quiet()}
	var workers []*kinesis.Worker
	for i, name := range []string{"a", "b", "c"} {
		w, err := kinesis.Start(context.Background(), ta.consumer(t, eng, name), opt)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		workers = append(workers, w)
		waitOwners(t, cps, func(m map[string]int) bool { return len(m) == i+1 && sum(m) == 6 && maxOf(m)-minOf(m) <= 1 })
	}
	owners := waitOwners(t, cps, func(m map[string]int) bool { return len(m) == 3 && sum(m) == 6 && maxOf(m) == 2 })
	t.Logf("three workers hold %v", owners)

	// From now on, sample who holds what, and count the takes.
	takesBefore := cps.takes.Load()
	var mu sync.Mutex
	most := 0
	var worst map[string]int
	ctx, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			ls, err := cps.Leases(ctx)
			if err == nil {
				m := map[string]int{}
				for _, l := range ls {
					if l.Live(time.Now()) {
						m[l.Owner]++
					}
				}
				mu.Lock()
				if maxOf(m) > most {
					most, worst = maxOf(m), m
				}
				mu.Unlock()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	workers[0].Stop()
	waitOwners(t, cps, func(m map[string]int) bool { return len(m) == 2 && sum(m) == 6 })
	time.Sleep(lease) // three more rounds of each worker's claims
	stopSampling()
	<-sampled
	owners = waitOwners(t, cps, func(m map[string]int) bool { return len(m) == 2 && sum(m) == 6 })
	t.Logf("after a stopped, b and c hold %v", owners)
	if maxOf(owners) != 3 {
		t.Errorf("b and c hold %v, want three each", owners)
	}
	if most > 3 {
		t.Errorf("a worker held %d shards (%v) after a stopped, over its share of three", most, worst)
	}
	if n := cps.takes.Load() - takesBefore; n != 0 {
		t.Errorf("%d shards taken from a worker after a stopped, want none: its two free shards were enough", n)
	}
}

func minOf(m map[string]int) int {
	n := -1
	for _, v := range m {
		if n < 0 || v < n {
			n = v
		}
	}
	return n
}
