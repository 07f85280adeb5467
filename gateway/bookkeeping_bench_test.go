package gateway

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// BenchmarkBookkeeping is the per-request bookkeeping of a claimed request, as the gateway
// does it: the claim clock (idem_claims_overdue) around the effect, the drainer around the
// upstream call, the request's registration dropped when its handler returns. Each case runs
// under RunParallel, so that contention on their locks shows:
//
//   - none: the baseline, the same loop (a request's upstreamOutcome in its context) without
//     either tracker;
//   - table: the gateway's, one registration per request in the drainer's sharded table;
//   - global: what it replaced, kept here to compare in the same run: a global lock and a map
//     for each tracker, and two allocations per claim for the clock.
//
// Set against BenchmarkGatewayNewKey, the whole request, in the same run:
//
//	go test -run '^$' -bench 'Bookkeeping|GatewayNewKey' -benchmem -cpu 1,2 ./gateway
func BenchmarkBookkeeping(b *testing.B) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b.Run("none", func(b *testing.B) {
		benchCalls(b, func(ctx context.Context, o *upstreamOutcome, deadline time.Time) {
			o.deadline = deadline
		})
	})
	b.Run("table", func(b *testing.B) {
		d := newDrainer(idem.UncertainExpire, time.Minute, memstore.New(), log)
		clock := newClaimClock(time.Minute, d)
		benchCalls(b, func(ctx context.Context, o *upstreamOutcome, deadline time.Time) {
			ectx := clock.begin(ctx)
			d.begin(o, deadline)
			clock.end(ectx)
			d.end(o)
		})
	})
	b.Run("global", func(b *testing.B) {
		clock := &globalClock{now: time.Now, live: map[*globalClaimStart]struct{}{}}
		d := &globalCalls{calls: map[*upstreamOutcome]struct{}{}, floors: map[string]floor{}}
		benchCalls(b, func(ctx context.Context, o *upstreamOutcome, deadline time.Time) {
			ectx := clock.begin(ctx)
			d.begin(o, deadline)
			clock.end(ectx)
			d.end(o)
		})
	})
}

// benchCalls runs call for b.N claimed requests, each with an upstreamOutcome of its own in
// its context, as the gateway gives it one.
func benchCalls(b *testing.B, call func(ctx context.Context, o *upstreamOutcome, deadline time.Time)) {
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		deadline := time.Now().Add(time.Minute)
		for pb.Next() {
			o := &upstreamOutcome{claimed: true, key: "k", token: n.Add(1), expires: deadline}
			ctx := context.WithValue(context.Background(), outcomeKey{}, o)
			call(ctx, o, deadline)
		}
	})
}

// globalClock is the claim clock as it was before the drainer's table: a global lock, a map,
// and a start and a context value allocated per claim.
type globalClock struct {
	now  func() time.Time
	mu   sync.Mutex
	live map[*globalClaimStart]struct{}
}

type globalClaimStart struct{ at time.Time }

type globalClaimStartKey struct{}

func (c *globalClock) begin(ctx context.Context) context.Context {
	s := &globalClaimStart{at: c.now()}
	c.mu.Lock()
	c.live[s] = struct{}{}
	c.mu.Unlock()
	return context.WithValue(ctx, globalClaimStartKey{}, s)
}

func (c *globalClock) end(ctx context.Context) {
	if s, ok := ctx.Value(globalClaimStartKey{}).(*globalClaimStart); ok {
		c.mu.Lock()
		delete(c.live, s)
		c.mu.Unlock()
	}
}

// globalCalls is the drainer's begin and end as they were: a global lock and a map.
type globalCalls struct {
	draining atomic.Bool
	mu       sync.Mutex
	calls    map[*upstreamOutcome]struct{}
	floors   map[string]floor
	empty    chan struct{}
}

func (d *globalCalls) begin(o *upstreamOutcome, deadline time.Time) {
	d.mu.Lock()
	o.deadline = deadline
	d.calls[o] = struct{}{}
	if d.draining.Load() && o.claimed {
		d.floors[o.key] = floor{token: o.token, until: deadline}
	}
	d.mu.Unlock()
}

func (d *globalCalls) end(o *upstreamOutcome) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.calls[o]; !ok {
		return
	}
	delete(d.calls, o)
	if f, ok := d.floors[o.key]; ok && o.claimed && f.token == o.token {
		delete(d.floors, o.key)
	}
	if len(d.calls) == 0 && d.empty != nil {
		close(d.empty)
		d.empty = nil
	}
}
