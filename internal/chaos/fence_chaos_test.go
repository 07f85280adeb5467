//go:build chaos

package chaos_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemkit/idem/internal/chaos"
)

// ---- the fence class: faults aimed where fencing decides ----

// newFenceOp makes up an operation of the fence class with plan p, for a tenant in turn, and
// adds it to the operations the probes check.
func (h *harness) newFenceOp(p string) string {
	n := int(h.fenceSeq.Add(1))
	op := opID(tenantName(n%h.cfg.tenants), fmt.Sprintf("f-%05d.%s", n, p))
	h.mu.Lock()
	h.fenceOps = append(h.fenceOps, op)
	h.mu.Unlock()
	return op
}

// expectFence returns a channel that gets the gateway of each execution of op the upstream
// records.
func (h *harness) expectFence(op string) chan string {
	c := make(chan string, 8)
	h.fences.Store(op, c)
	return c
}

// fenceExecuted is the upstream's report of an execution of a fencing operation.
func (h *harness) fenceExecuted(op, gateway string) {
	if c, ok := h.fences.Load(op); ok {
		select {
		case c.(chan string) <- gateway:
		default:
		}
	}
}

// otherSlot returns a gateway other than not that is up and not paused, or nil.
func (h *harness) otherSlot(not *slot) *slot {
	h.pickMu.Lock()
	defer h.pickMu.Unlock()
	var ready []*slot
	for _, s := range h.slots {
		if s != not && s.up.Load() && !s.paused.Load() {
			ready = append(ready, s)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	return ready[int(h.roll()*float64(len(ready)))%len(ready)]
}

// deliverTo sends op straight to gateway s (no fault proxy) until it gets an answer other than
// 409 in flight, 503 or a network error, for up to 30s, and records it.
func (h *harness) deliverTo(ctx context.Context, s *slot, op string) chaos.Answer {
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: directTo{s: s, base: tr}, Timeout: 20 * time.Second}
	_, base := splitOp(op)
	body := h.payload(op, 0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		a := h.deliver(ctx, client, op, h.run+"-"+base, body, nil)
		retry := a.Status == 0 || a.Status == http.StatusConflict || a.Status == http.StatusServiceUnavailable
		if !retry || time.Now().After(deadline) {
			h.record(a)
			return a
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// directTo is a RoundTripper to one gateway's port.
type directTo struct {
	s    *slot
	base http.RoundTripper
}

func (d directTo) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.URL.Host = fmt.Sprintf("127.0.0.1:%d", d.s.port)
	out.Host = ""
	return d.base.RoundTrip(out)
}

// fenceCompletions is the completion leg: a gateway forwards a slow effect, and as the
// upstream records it the gateway is stopped (SIGSTOP) past its lease; another gateway takes
// the key over and runs its own slow execution; the first resumes in the middle of it, gets
// its upstream's answer and tries to complete. Its completion must be refused (ErrLeaseLost):
// otherwise the key is completed with the first answer while the second execution ran.
// It runs until ctx ends, and at least fenceMin times.
func (h *harness) fenceCompletions(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	aims := h.aims("fence", planFenceComplete)
	for n := 0; n < h.cfg.fenceMin || ctx.Err() == nil; {
		h.fenceRest(ctx, n)
		a, op, deliveries, ok := aims.next(ctx, func(s *slot) *atomic.Bool { return &s.paused })
		if !ok {
			if aims.failed {
				return
			}
			continue
		}
		n++
		deliveries.Go(func() { a.pause(h.lease + 800*time.Millisecond) })
		time.Sleep(h.lease + 200*time.Millisecond)
		if b := h.otherSlot(a); b != nil {
			deliveries.Go(func() { h.deliverTo(context.WithoutCancel(ctx), b, op) })
		}
		deliveries.Wait()
	}
}

// aimer sends the operations of one aimed leg: each to a gateway it marks (so no other fault
// picks it), and waits until the upstream records its execution.
type aimer struct {
	h      *harness
	leg    string // for the log
	plan   string
	missed int
	failed bool // too many operations were never executed: the leg gave up
}

func (h *harness) aims(leg, plan string) *aimer {
	return &aimer{h: h, leg: leg, plan: plan}
}

// next picks a gateway, sets the flag mark returns for it, sends it a new operation and
// waits for the upstream to record its execution. It returns the gateway, the operation and
// the deliveries under way (the first one included); ok is false, with the flag cleared and
// the deliveries waited for, when there was no gateway to aim at or the operation was not
// executed within 10s.
func (m *aimer) next(ctx context.Context, mark func(*slot) *atomic.Bool) (a *slot, op string, deliveries *sync.WaitGroup, ok bool) {
	h := m.h
	a = h.pickSlot(func(s *slot) { mark(s).Store(true) })
	if a == nil {
		time.Sleep(100 * time.Millisecond)
		return nil, "", nil, false
	}
	op = h.newFenceOp(m.plan)
	executed := h.expectFence(op)
	deliveries = &sync.WaitGroup{}
	var first chaos.Answer
	deliveries.Go(func() { first = h.deliverTo(context.WithoutCancel(ctx), a, op) })
	select {
	case <-executed:
		return a, op, deliveries, true
	case <-time.After(10 * time.Second):
	}
	mark(a).Store(false)
	deliveries.Wait()
	h.t.Logf("%s: %s sent to %s was not executed within 10s (its answer: %d %s %s)", m.leg, op, a.name, first.Status, first.Err, clipLine(string(first.Body)))
	if m.missed++; m.missed > 2*h.cfg.fenceMin {
		h.t.Errorf("%s: %d operations sent to a gateway were not executed", m.leg, m.missed)
		m.failed = true
	}
	return nil, "", nil, false
}

// fenceExtensions is the extension leg: a gateway's link to the store holds back the store's
// answers for longer than the lease; the gateway's claim of a slow effect lands meanwhile but
// it hears of it late; another gateway takes the key over and runs its execution; the first
// then gets its claim, finds little of its lease left and extends it before starting. The
// extension must be refused (ErrLeaseLost) and the effect not started: otherwise it runs a
// second time while the other execution runs. It runs until ctx ends, and at least fenceMin
// times (not on a store file, which has no link to hold back).
func (h *harness) fenceExtensions(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	if _, file := h.store.(sqliteFile); file {
		return
	}
	for n := 0; n < h.cfg.fenceMin || ctx.Err() == nil; n++ {
		h.fenceRest(ctx, n)
		a := h.pickSlot(func(s *slot) { s.busy.Store(true) })
		if a == nil {
			n--
			time.Sleep(100 * time.Millisecond)
			continue
		}
		op := h.newFenceOp(planFenceExtend)
		// A redis client gives up on an answer after 3s: the hold ends before.
		from, to := a.relay.hold(h.lease + 700*time.Millisecond)
		h.mu.Lock()
		h.outages = append(h.outages, chaos.Outage{From: from, To: to, Gateway: a.name})
		h.cuts++
		h.mu.Unlock()
		var deliveries sync.WaitGroup
		time.Sleep(50 * time.Millisecond)
		deliveries.Go(func() { h.deliverTo(context.WithoutCancel(ctx), a, op) })
		time.Sleep(h.lease + 200*time.Millisecond)
		if b := h.otherSlot(a); b != nil {
			deliveries.Go(func() { h.deliverTo(context.WithoutCancel(ctx), b, op) })
		}
		deliveries.Wait()
		a.busy.Store(false)
	}
}

// fenceRest waits between two aims of a fence leg, for cfg.fenceGap, so the load goes on
// meanwhile; not before the first, nor once the run is over (the leg's last aims, up to
// fenceMin, go at once).
func (h *harness) fenceRest(ctx context.Context, n int) {
	if n == 0 || h.cfg.fenceGap[1] == 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(h.between(h.cfg.fenceGap[0], h.cfg.fenceGap[1])):
	}
}

// ---- rolling deploys ----

// deployer restarts the gateways one after the other now and then, as a rolling deploy does:
// SIGTERM, the gateway drains and exits on its own, a new process starts on the same port;
// then the next. A re-execution after such a stop is never excused.
func (h *harness) deployer(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.between(3*time.Second, 6*time.Second)):
		}
		for _, s := range h.slots {
			if ctx.Err() != nil {
				return
			}
			if h.takeSlot(s) {
				h.deploy(ctx, s)
			}
			time.Sleep(h.between(100*time.Millisecond, 400*time.Millisecond))
		}
	}
}

// drainAims is the deploy class's aimed leg: a gateway forwards a slow effect (drainEffect:
// longer than the drain, shorter than the upstream timeout) and, as the upstream records it, is
// stopped as a rolling deploy stops it: SIGTERM, a drain shorter than the call, exit, and a new
// process on its port. The drain cuts the call, which may still act; its key must stay held
// until the call's deadline and a lease after it (the drain's floor), so the client's retries
// get 409 until then and execute, if at all, only after: a re-execution sooner is the double
// effect a deploy must never cause. It runs until ctx ends, and at least fenceMin times.
func (h *harness) drainAims(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	aims := h.aims("drain", planDrain)
	for n := 0; n < h.cfg.fenceMin || ctx.Err() == nil; {
		h.fenceRest(ctx, n)
		a, _, deliveries, ok := aims.next(ctx, func(s *slot) *atomic.Bool { return &s.busy })
		if !ok {
			if aims.failed {
				return
			}
			continue
		}
		n++
		h.pickMu.Lock()
		a.up.Store(false)
		h.pickMu.Unlock()
		h.deploy(ctx, a)
		a.busy.Store(false)
		deliveries.Wait()
	}
}

// takeSlot marks s down for a deploy if it is up, not paused nor aimed at, and another
// gateway is up.
func (h *harness) takeSlot(s *slot) bool {
	h.pickMu.Lock()
	defer h.pickMu.Unlock()
	others := 0
	for _, o := range h.slots {
		if o != s && o.up.Load() && !o.paused.Load() {
			others++
		}
	}
	if others == 0 || !s.up.Load() || s.paused.Load() || s.busy.Load() {
		return false
	}
	s.up.Store(false)
	return true
}

// deploy stops s with SIGTERM, waits for it to drain and exit, and starts it again.
func (h *harness) deploy(ctx context.Context, s *slot) {
	name, at := s.name, time.Now()
	// The drain may wait for upstream calls (up to the upstream timeout) and the store calls
	// that follow them; past that, the process is killed and that counts as a kill.
	err := s.p.signal(syscall.SIGTERM, shutdownTimeout+upstreamTimeout+10*time.Second)
	d := chaos.Deploy{Gateway: name, At: at, Exited: time.Now()}
	h.mu.Lock()
	h.deploys = append(h.deploys, d)
	if err != nil {
		h.kills = append(h.kills, chaos.Kill{Gateway: name, At: d.Exited})
	}
	h.mu.Unlock()
	if err != nil {
		h.t.Errorf("deploy of %s: %v", name, err)
	}
	if err := s.start(context.WithoutCancel(ctx)); err != nil {
		h.t.Errorf("restart %s after its deploy: %v", s.name, err)
	}
}
