package gateway

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// ProblemShuttingDown (503): the gateway was shutting down and its drain ended while the
// request's upstream call was still out. The request may have been processed: its key follows
// the uncertain policy (Config.Uncertain), so a retry with the same key gets 409 while the
// upstream may still act, then the stored answer, or (hold) waits for `idem release`.
const ProblemShuttingDown = "https://idemkit.dev/problems/shutting-down"

// drainer keeps track of the upstream calls in flight, so that a gateway that shuts down
// never leaves a claim to lapse while its upstream call may still run: from Drain on, every
// claim whose call is out gets a floor, an end of its lease that the Uncertain policy sets
// (hold: the record's expiry; expire: the call's deadline + the lease; release: the call's
// deadline + 1s), written once with the store's Extend and kept by every later extension.
// It works through the same store the engines use (floorStore): no operation of its own.
//
// Its table of calls is also the claim clock's (idem_claims_overdue): a request is registered
// once, when its claim's effect or its upstream call begins, whichever is first, and removed
// when its handler returns. The table is sharded, each shard a list linked through the
// requests' own upstreamOutcome under its own lock: no allocation and no lock shared by all
// requests on the request path. Drain and Abort, rare, lock every shard.
type drainer struct {
	policy idem.UncertainPolicy
	lease  time.Duration
	store  idem.Store // the instrumented store, below floorStore
	log    *slog.Logger

	draining atomic.Bool // Drain was called: floors apply (set with every shard locked)
	cutCtx   context.Context
	cutCall  context.CancelFunc // ends every upstream call (Abort)
	cut      atomic.Bool        // Abort was called (set with every shard locked)

	seq   atomic.Uint32         // spreads registrations over the shards
	calls [callShards]callShard // requests whose effect or upstream call is or was under way, until their handler returns
	out   atomic.Int64          // of those, the ones whose upstream call began (changed under their shard's lock)

	mu     sync.Mutex       // guards floors and empty; taken after a shard's lock, never before
	floors map[string]floor // by storage key
	empty  chan struct{}    // closed when out drops to 0 after Abort
}

// callShards is the number of shards of the drainer's table of calls.
const callShards = 32

// callShard is one shard of the drainer's table of calls: a list of requests linked through
// their upstreamOutcome (prev, next), guarded by mu.
type callShard struct {
	mu   sync.Mutex
	head *upstreamOutcome
	_    [64 - 16]byte // one shard per cache line: no false sharing between shards' locks
}

// floor is the least end of a claim's lease while the gateway drains.
type floor struct {
	token int64
	until time.Time
	keep  bool // the call was cut by Abort: a release waits for until (the lease lapses then)
}

func newDrainer(policy idem.UncertainPolicy, lease time.Duration, st idem.Store, log *slog.Logger) *drainer {
	d := &drainer{policy: policy, lease: lease, store: st, log: log, floors: map[string]floor{}}
	d.cutCtx, d.cutCall = context.WithCancel(context.Background())
	return d
}

// floorFor is the floor of the claim of o, whose call ends by o.deadline.
func (d *drainer) floorFor(o *upstreamOutcome) floor {
	f := floor{token: o.token, until: o.deadline.Add(d.lease)}
	switch d.policy {
	case idem.UncertainHold:
		f.until = o.expires
	case idem.UncertainRelease:
		f.until = o.deadline.Add(time.Second)
	}
	return f
}

// lock locks o's shard, registering o there first if it is not yet, and returns the shard.
// Only o's request goroutine calls it (o.registered and o.shard are that goroutine's).
func (d *drainer) lock(o *upstreamOutcome) *callShard {
	if o.registered {
		sh := &d.calls[o.shard]
		sh.mu.Lock()
		return sh
	}
	o.registered = true
	o.shard = d.seq.Add(1) % callShards
	sh := &d.calls[o.shard]
	sh.mu.Lock()
	o.prev, o.next = nil, sh.head
	if sh.head != nil {
		sh.head.prev = o
	}
	sh.head = o
	return sh
}

// lockAll locks every shard, in order.
func (d *drainer) lockAll() {
	for i := range d.calls {
		d.calls[i].mu.Lock()
	}
}

// unlockAll unlocks every shard.
func (d *drainer) unlockAll() {
	for i := range d.calls {
		d.calls[i].mu.Unlock()
	}
}

// effectBegan notes that the effect of o's claim began at at.
func (d *drainer) effectBegan(o *upstreamOutcome, at time.Time) {
	sh := d.lock(o)
	o.effectAt.Store(at.UnixNano())
	sh.mu.Unlock()
}

// effectsBefore counts the requests whose claim's effect began before cutoff and has not
// ended.
func (d *drainer) effectsBefore(cutoff time.Time) int {
	c, n := cutoff.UnixNano(), 0
	for i := range d.calls {
		sh := &d.calls[i]
		sh.mu.Lock()
		for o := sh.head; o != nil; o = o.next {
			if at := o.effectAt.Load(); at != 0 && at < c {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// begin notes that o's upstream call, which ends by deadline, is about to be sent. While the
// gateway drains, o's claim gets its floor before the call leaves.
func (d *drainer) begin(o *upstreamOutcome, deadline time.Time) {
	sh := d.lock(o)
	o.deadline = deadline
	d.out.Add(1)
	var f floor
	set := d.draining.Load() && o.claimed
	if set {
		f = d.floorFor(o)
		d.mu.Lock()
		d.floors[o.key] = f
		d.mu.Unlock()
	}
	sh.mu.Unlock()
	if set {
		d.apply(o.key, f)
	}
}

// end notes that o's handler has returned: its claim is completed, released or held. Only
// o's request goroutine calls it.
func (d *drainer) end(o *upstreamOutcome) {
	if !o.registered {
		return
	}
	o.registered = false
	sh := &d.calls[o.shard]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if o.prev != nil {
		o.prev.next = o.next
	} else {
		sh.head = o.next
	}
	if o.next != nil {
		o.next.prev = o.prev
	}
	o.prev, o.next = nil, nil
	if o.deadline.IsZero() {
		return // its upstream call never began
	}
	last := d.out.Add(-1) == 0
	// Floors exist only once draining is set, and empty only once cut is: both are set with
	// every shard locked, so with this one locked they cannot change under us.
	draining, cut := d.draining.Load(), d.cut.Load()
	if !draining && !(last && cut) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if f, ok := d.floors[o.key]; ok && o.claimed && f.token == o.token {
		delete(d.floors, o.key)
	}
	if last && d.empty != nil {
		close(d.empty)
		d.empty = nil
	}
}

// apply writes f to the store for key.
func (d *drainer) apply(key string, f floor) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.store.Extend(ctx, key, f.token, f.until); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
		d.log.Warn("drain: could not keep a claim whose upstream call is out from lapsing", "key", key, "until", f.until, "err", err)
	}
}

// drain sets the floor of every claim whose upstream call is out, and of every one sent from
// now on.
func (d *drainer) drain() {
	type item struct {
		key string
		f   floor
	}
	var todo []item
	d.lockAll()
	if d.draining.Swap(true) {
		d.unlockAll()
		return
	}
	d.mu.Lock()
	for i := range d.calls {
		for o := d.calls[i].head; o != nil; o = o.next {
			if o.claimed && !o.deadline.IsZero() {
				f := d.floorFor(o)
				d.floors[o.key] = f
				todo = append(todo, item{o.key, f})
			}
		}
	}
	d.mu.Unlock()
	d.unlockAll()
	if len(todo) == 0 {
		return
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, it := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			d.apply(it.key, it.f)
		}()
	}
	wg.Wait()
	d.log.Info("drain: claims whose upstream call is out are kept from lapsing", "claims", len(todo), "uncertain", d.policy.String())
}

// abort ends every upstream call still out and waits, until ctx ends, for their handlers to
// answer and settle their claims.
func (d *drainer) abort(ctx context.Context) int {
	d.lockAll()
	n := int(d.out.Load())
	d.mu.Lock()
	for key, f := range d.floors {
		f.keep = true
		d.floors[key] = f
	}
	var empty chan struct{}
	if n > 0 {
		empty = make(chan struct{})
		d.empty = empty
	}
	d.cut.Store(true)
	d.mu.Unlock()
	d.unlockAll()
	d.cutCall()
	if empty != nil {
		select {
		case <-empty:
		case <-ctx.Done():
		}
	}
	return n
}

// raise returns until, or the floor of key's claim under token if that is later.
func (d *drainer) raise(key string, token int64, until time.Time) time.Time {
	if !d.draining.Load() {
		return until
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if f, ok := d.floors[key]; ok && f.token == token && f.until.After(until) {
		return f.until
	}
	return until
}

// keeps reports whether a release of key's claim under token must wait for its floor: its
// call was cut by Abort and may still run upstream.
func (d *drainer) keeps(key string, token int64) bool {
	if !d.cut.Load() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f, ok := d.floors[key]
	return ok && f.keep && f.token == token && time.Now().Before(f.until)
}

// floorStore is the store the gateway's engines use: it notes each claim on its request's
// upstreamOutcome, and keeps the drainer's floors (an extension never shortens a floor; the
// release of a claim whose call was cut waits for it, by letting the lease lapse there).
type floorStore struct {
	idem.Store
	d *drainer
}

func (s *floorStore) noteClaim(ctx context.Context, key string, res idem.Reservation) {
	if !res.Claimed {
		return
	}
	// Written by the request's own goroutine before its call begins (begin publishes it to
	// the drainer under its lock).
	if o, ok := ctx.Value(outcomeKey{}).(*upstreamOutcome); ok {
		o.claimed, o.key, o.token, o.expires = true, key, res.Record.Token, res.Record.ExpiresAt
	}
}

// Reserve implements idem.Store.
func (s *floorStore) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	res, err := s.Store.Reserve(ctx, req)
	s.noteClaim(ctx, req.Key, res)
	return res, err
}

// Extend implements idem.Store.
func (s *floorStore) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	return s.Store.Extend(ctx, key, token, s.d.raise(key, token, until))
}

// Release implements idem.Store.
func (s *floorStore) Release(ctx context.Context, key string, token int64) error {
	if s.d.keeps(key, token) {
		s.d.log.Warn("drain: a claim whose upstream call was cut is kept until the call's deadline, then lapses", "key", key)
		return nil
	}
	return s.Store.Release(ctx, key, token)
}
