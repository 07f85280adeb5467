//go:build chaos

package chaos_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/chaos"
)

// ---- per-operation plans: faults that hit one operation's first execution ----

// An operation's plan is part of its name ("op-0000042.cut"), so the upstream, the clients
// and the probes all know it. The upstream applies it to the operation's first execution
// only (then the operation can succeed), and never once the run is over.
const (
	planNone    = ""
	planCut     = "cut"     // the upstream acts, sends status, headers and half the body, then resets
	planChunk   = "chunk"   // the upstream acts, sends a chunked answer and resets before the last chunk
	planSlow    = "slow"    // the upstream acts, then answers after the gateway's upstream timeout
	planLease   = "lease"   // the upstream takes longer than the lease; clients give up on attempts after 1s and retry
	planBig     = "big"     // the answer is larger than the gateway keeps; one client disconnects mid-download
	planHalfReq = "halfreq" // a client sends half the body and disconnects, before the real deliveries
	planHangUp  = "hangup"  // one client sends the request and disconnects once the answer begins

	// Slow effects: on every execution, not only the first.
	planSlowEffect    = "slowfx" // the upstream takes slowEffectMin to slowEffectMax to answer
	planFenceComplete = "fencec" // the fence class's completion leg (made up by it, not drawn)
	planFenceExtend   = "fencee" // the fence class's extension leg (made up by it, not drawn)
	planDrain         = "drain"  // the deploy class's aimed leg (made up by it, not drawn)
)

// How long slow effects take: a planSlowEffect one, and each execution of a fencing operation.
// Pauses and deploys then land while effects run, and a successor's execution lasts long
// enough for a late holder's completion or extension to land in it.
const (
	slowEffectMin = 200 * time.Millisecond
	slowEffectMax = 1500 * time.Millisecond
	fenceEffect   = 1200 * time.Millisecond
	// drainEffect is how long an execution of the deploy class's aimed leg takes: longer than
	// the drain (shutdownTimeout), shorter than the upstream timeout, so the drain cuts it.
	drainEffect = 2500 * time.Millisecond
)

// planMix is the share of operations that get each plan.
var planMix = []struct {
	plan  string
	share float64
}{
	{planCut, 0.008}, {planChunk, 0.008}, {planSlow, 0.002}, {planLease, 0.008},
	{planBig, 0.008}, {planHalfReq, 0.008}, {planHangUp, 0.008}, {planSlowEffect, 0.1},
}

// choosePlan draws a plan for one operation.
func (h *harness) choosePlan() string {
	if !h.cfg.faults["upstream"] && !h.cfg.faults["client"] {
		return planNone
	}
	r := h.roll()
	for _, m := range planMix {
		if r < m.share {
			switch m.plan {
			case planHalfReq, planHangUp, planBig:
				if !h.cfg.faults["client"] {
					return planNone
				}
			default:
				if !h.cfg.faults["upstream"] {
					return planNone
				}
			}
			return m.plan
		}
		r -= m.share
	}
	return planNone
}

// planOf returns an operation's plan, from its name.
func planOf(op string) string {
	if i := strings.IndexByte(op, '.'); i >= 0 {
		return op[i+1:]
	}
	return planNone
}

// bigAnswerPad is how much padding a planBig answer carries: more than the gateways'
// --max-body, so it is streamed and not kept.
const bigAnswerPad = 80 << 10

// ---- an upstream that fails mid-answer ----

// resetConn takes the connection away from the HTTP server and returns it, after the raw
// bytes head were written, to be reset.
func resetAfter(w io.Writer, head string) {
	hj, ok := w.(interface {
		Hijack() (net.Conn, *bufio.ReadWriter, error)
	})
	if !ok {
		panic("the upstream's ResponseWriter cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	_, _ = io.WriteString(conn, head)
	time.Sleep(5 * time.Millisecond) // let the head go out before the reset
	reset(conn)
}

// reset closes c with an RST (SO_LINGER 0) rather than a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// cutAnswer sends the status, the headers (with the full Content-Length) and half of body,
// then resets the connection.
func cutAnswer(w io.Writer, body string) {
	resetAfter(w, fmt.Sprintf("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		len(body), body[:len(body)/2]))
}

// cutChunked sends a chunked answer's first chunk (half of body), then resets the connection
// before the rest and the last chunk.
func cutChunked(w io.Writer, body string) {
	half := body[:len(body)/2]
	resetAfter(w, fmt.Sprintf("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n",
		len(half), half))
}

// ---- clients that go away ----

// dialGateway connects straight to a random running gateway (not through its fault proxy).
func (h *harness) dialGateway() (net.Conn, error) {
	s := h.slots[int(h.roll()*float64(len(h.slots)))%len(h.slots)]
	return net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
}

func requestHead(tenant, base, key string, n int) string {
	return fmt.Sprintf("POST /ops/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nIdempotency-Key: %s\r\n%s: %s\r\nContent-Length: %d\r\n\r\n",
		base, key, tenantHeader, tenant, n)
}

// halfRequest sends the request head and half its body, then resets the connection: the
// gateway must not forward it, and must not keep the key claimed.
func (h *harness) halfRequest(tenant, base, key string, body []byte) {
	c, err := h.dialGateway()
	if err != nil {
		return
	}
	_, _ = io.WriteString(c, requestHead(tenant, base, key, len(body))+string(body[:len(body)/2]))
	time.Sleep(20 * time.Millisecond)
	reset(c)
	h.clientFaults.halfRequests.Add(1)
}

// hangUp sends the whole request, reads n bytes of the answer (or waits up to 10s for them),
// then resets the connection.
func (h *harness) hangUp(tenant, base, key string, body []byte, n int) {
	c, err := h.dialGateway()
	if err != nil {
		return
	}
	defer reset(c)
	if _, err := io.WriteString(c, requestHead(tenant, base, key, len(body))+string(body)); err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.ReadFull(c, make([]byte, n))
	h.clientFaults.hangUps.Add(1)
}

// attemptTimeout gives up on one attempt of a planLease operation after a second, as an
// impatient client does; the next attempt carries the same key.
func attemptTimeout(req *http.Request, base http.RoundTripper) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), time.Second)
	resp, err := base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose{resp.Body, cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// ---- gateways paused past their lease ----

// pauser stops a random running gateway with SIGSTOP for longer than its lease, then resumes
// it, one at a time: its claims are taken over meanwhile, and once resumed it must fail to
// complete them (fencing).
func (h *harness) pauser(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.between(h.cfg.pauseGap[0], h.cfg.pauseGap[1])):
		}
		s := h.pickSlot(func(s *slot) { s.paused.Store(true) })
		if s == nil {
			continue
		}
		s.pause(h.between(h.lease+300*time.Millisecond, h.lease+1500*time.Millisecond))
	}
}

// pause stops the gateway process for d and records it.
func (s *slot) pause(d time.Duration) {
	defer s.paused.Store(false)
	name := s.name
	from := time.Now()
	if err := s.p.send(syscall.SIGSTOP); err != nil {
		return
	}
	time.Sleep(d)
	// The end is read before the signal goes: the process cannot resume earlier, whereas a
	// time read after it may come later than what the resumed gateway already did (this
	// goroutine may wait for a core), and a late send would look unexcused.
	to := time.Now()
	_ = s.p.send(syscall.SIGCONT)
	s.h.mu.Lock()
	s.h.pauses = append(s.h.pauses, chaos.Pause{Gateway: name, From: from, To: to})
	s.h.mu.Unlock()
}

// pickSlot chooses a random gateway that is up and not paused, unless fewer than two are,
// and marks it with mark, under the lock that the killer and the pauser share.
func (h *harness) pickSlot(mark func(*slot)) *slot {
	h.pickMu.Lock()
	defer h.pickMu.Unlock()
	var ready, free []*slot
	for _, s := range h.slots {
		if s.up.Load() && !s.paused.Load() {
			ready = append(ready, s)
			if !s.busy.Load() {
				free = append(free, s)
			}
		}
	}
	if len(ready) < 2 || len(free) == 0 {
		return nil
	}
	s := free[int(h.roll()*float64(len(free)))%len(free)]
	mark(s)
	return s
}

// ---- an operator releasing keys during the load ----

// operator runs `idem release` now and then: without --force on an operation in flight (a
// live claim: it must be refused, or released only if its holder is gone), and with --force on
// an operation that has finished and succeeded (the documented way to execute a completed
// key again; only its probe will).
func (h *harness) operator(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.between(300*time.Millisecond, 900*time.Millisecond)):
		}
		force := h.roll() < 0.25
		op, ok := h.pickOp(force)
		if !ok {
			continue
		}
		r := h.release(ctx, op, force)
		h.mu.Lock()
		h.releases = append(h.releases, r)
		h.mu.Unlock()
	}
}

// pickOp returns a random operation in flight or, with finished, one that finished with
// success (and is then no longer a candidate).
func (h *harness) pickOp(finished bool) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if finished {
		if len(h.succeededOps) == 0 {
			return "", false
		}
		i := int(h.roll()*float64(len(h.succeededOps))) % len(h.succeededOps)
		op := h.succeededOps[i]
		h.succeededOps[i] = h.succeededOps[len(h.succeededOps)-1]
		h.succeededOps = h.succeededOps[:len(h.succeededOps)-1]
		return op, true
	}
	n := int(h.roll() * float64(len(h.inFlight)))
	for op := range h.inFlight {
		if n == 0 {
			return op, true
		}
		n--
	}
	return "", false
}

// release runs `idem release [--force] KEY` against the store and reports what it did.
func (h *harness) release(ctx context.Context, op string, force bool) chaos.Release {
	args := []string{"release", "--store", h.store.URL()}
	if force {
		args = append(args, "--force")
	}
	tenant, base := splitOp(op)
	args = append(args, idemhttp.StorageKey(scopeOf(tenant), h.run+"-"+base))
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r := chaos.Release{Op: op, At: time.Now(), Force: force}
	cmd := exec.CommandContext(ctx, h.binary, args...)
	cmd.Env = append(cmd.Environ(), "IDEM_CONFIG=")
	out, err := cmd.CombinedOutput()
	r.Done = err == nil && !strings.Contains(string(out), "nothing to release")
	r.Unknown = h.countRelease(string(out), err == nil) == "failed" && !strings.Contains(string(out), "storeurl: open")
	return r
}

// countRelease sorts an `idem release` outcome for the fault mix and returns its class.
func (h *harness) countRelease(out string, ok bool) string {
	var what string
	switch {
	case ok && strings.HasPrefix(out, "released "):
		what = "released in progress"
	case ok && strings.Contains(out, "deleted completed"):
		what = "deleted completed (--force)"
	case ok && strings.Contains(out, "nothing to release"):
		what = "nothing to release"
	case ok:
		what = "other"
	case strings.Contains(out, "refusing"):
		what = "refused"
	case strings.Contains(out, "no record"):
		what = "no record yet"
	default:
		what = "failed"
	}
	h.mu.Lock()
	h.releaseOutcomes[what]++
	if what == "failed" && len(h.releaseFailures) < 3 {
		h.releaseFailures = append(h.releaseFailures, strings.TrimSpace(out))
	}
	h.mu.Unlock()
	return what
}
