package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// upstreamTransport returns a Transport tuned for one upstream host: connections are reused
// (Go's default keeps only 2 idle per host, which churns sockets under load) and time-boxed.
func upstreamTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           upstreamDialer().DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
}

// upstreamDialer returns the upstream Transport's dialer: a connection attempt gives up after
// 5s (a dial timeout is a call never sent, so the claim is released well before the call's
// deadline), and TCP keep-alive probes idle connections every 30s.
func upstreamDialer() *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
}

// bufferPool lends the proxy its 32 KiB copy buffers instead of allocating one per request.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

func (b *bufferPool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b *bufferPool) Put(x []byte) { b.p.Put(&x) }

// upstreamFailure says how an upstream call failed.
type upstreamFailure uint8

const (
	// notSent: the request never reached the upstream (connection refused, DNS, dial timeout):
	// nothing happened, the claim is released.
	notSent upstreamFailure = iota + 1
	// uncertain: the request was sent but no answer came (reset, timeout): the effect may have
	// happened; the claim is held per the uncertain policy.
	uncertain
)

// classify tells a failure before sending from one after.
func classify(err error) upstreamFailure {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return notSent
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return notSent
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return notSent
	}
	return uncertain
}

// proxy is the handler behind the idempotency middleware: it forwards to the upstream,
// detached from the client's connection.
type proxy struct {
	rp        *httputil.ReverseProxy
	drain     *drainer
	deadlines *deadlines
	log       *slog.Logger
	metrics   *Metrics
	format    idemhttp.ProblemFormatter // the problems' shape (Config.ErrorBody); nil: problem+json
}

// upstreamCall is the context of one upstream call: the request's values, without its
// cancellation (a client that goes away does not cancel the call), bounded by a deadline
// shared with the calls that started about when it did; plus a slot for the failure the error
// handler saw, if any. It costs one allocation and no timer of its own.
type upstreamCall struct {
	context.Context // the request's context, for its values only
	deadline        context.Context
	failure         upstreamFailure
}

// callKey is the context key under which an upstreamCall finds itself.
type callKey struct{}

// Deadline is the shared deadline's.
func (c *upstreamCall) Deadline() (time.Time, bool) { return c.deadline.Deadline() }

// Done is the shared deadline's.
func (c *upstreamCall) Done() <-chan struct{} { return c.deadline.Done() }

// Err is the shared deadline's.
func (c *upstreamCall) Err() error { return c.deadline.Err() }

// Value returns the call itself for callKey; then what the shared deadline answers (nothing
// but the context package's own lookup of the cancellation a derived context attaches to,
// which therefore needs no goroutine); then the request's values.
func (c *upstreamCall) Value(key any) any {
	if key == (callKey{}) {
		return c
	}
	if v := c.deadline.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// AfterFunc arranges for f to run when the deadline passes (the method context.AfterFunc and
// derived contexts use, so they need no goroutine either).
func (c *upstreamCall) AfterFunc(f func()) (stop func() bool) {
	return context.AfterFunc(c.deadline, f)
}

// deadlines hands out upstream-call deadlines shared by the calls that start within the same
// tick (1/16 of the timeout, at most a second): one timer per tick instead of one per
// request. A call gets at least the timeout, and at most a tick more. Each shared context
// ends by itself when its deadline passes.
type deadlines struct {
	parent        context.Context // ends every call at once (a drain that ran out of time)
	timeout, tick time.Duration
	mu            sync.Mutex
	cur           atomic.Pointer[sharedDeadline]
}

type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc // kept, never called early: the calls sharing ctx still run
	until  time.Time          // calls starting before this may share it
}

func newDeadlines(parent context.Context, timeout time.Duration) *deadlines {
	return &deadlines{parent: parent, timeout: timeout, tick: max(min(timeout/16, time.Second), time.Millisecond)}
}

// get returns the deadline context for a call starting now.
func (d *deadlines) get(now time.Time) context.Context {
	if sd := d.cur.Load(); sd != nil && now.Before(sd.until) {
		return sd.ctx
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if sd := d.cur.Load(); sd != nil && now.Before(sd.until) {
		return sd.ctx
	}
	until := now.Add(d.tick)
	ctx, cancel := context.WithDeadline(d.parent, until.Add(d.timeout))
	d.cur.Store(&sharedDeadline{ctx: ctx, cancel: cancel, until: until})
	return ctx
}

// outcomeKey is the context key of a request's *upstreamOutcome.
type outcomeKey struct{}

// upstreamOutcome is how a request's upstream call went, carried explicitly along the
// request's path: the gateway puts one in the request's context before the middleware, the
// proxy writes it, and the gateway's event hook (or its bypass handler) reads it to label the
// request upstream_error.
type upstreamOutcome struct {
	failure upstreamFailure
	// The claim the request holds, if any (noted by floorStore), and when its upstream call
	// ends at the latest (noted by the drainer as the call begins).
	claimed  bool
	key      string
	token    int64
	expires  time.Time
	deadline time.Time
	// effectAt is when the claim's effect began (Unix nanoseconds; 0: not under way), for
	// idem_claims_overdue.
	effectAt atomic.Int64
	// The request's place in the drainer's table of calls: registered and shard are the
	// request goroutine's own; prev and next are guarded by the shard's lock.
	registered bool
	shard      uint32
	prev, next *upstreamOutcome
}

// withOutcome returns r carrying a new upstreamOutcome, and that outcome.
func withOutcome(r *http.Request) (*http.Request, *upstreamOutcome) {
	o := new(upstreamOutcome)
	return r.WithContext(context.WithValue(r.Context(), outcomeKey{}, o)), o
}

// failed reports whether the upstream call of the request with context ctx failed.
func failed(ctx context.Context) bool {
	o, _ := ctx.Value(outcomeKey{}).(*upstreamOutcome)
	return o != nil && o.failure != 0
}

// record notes on r's outcome, if it carries one, how its upstream call failed.
func record(r *http.Request, f upstreamFailure) {
	if o, ok := r.Context().Value(outcomeKey{}).(*upstreamOutcome); ok {
		o.failure = f
	}
}

func newProxy(upstream *url.URL, transport http.RoundTripper, timeout time.Duration, log *slog.Logger, m *Metrics, d *drainer) *proxy {
	p := &proxy{drain: d, deadlines: newDeadlines(d.cutCtx, timeout), log: log, metrics: m}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
			// Never let the Transport replay a request on its own: it would, for a request
			// carrying Idempotency-Key with an empty or rewindable body, after a failure on a
			// reused connection where the upstream may already have acted. A body that is not
			// rewindable turns that off; the retry belongs to the client, through idem.
			if pr.Out.Body == nil || pr.Out.Body == http.NoBody {
				pr.Out.Body = io.NopCloser(strings.NewReader(""))
			}
			pr.Out.GetBody = nil
		},
		Transport:    transport,
		BufferPool:   newBufferPool(),
		ErrorHandler: p.upstreamError,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return p
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Detached: a client that disconnects or times out does not cancel the upstream call,
	// so the effect's response is still stored and the client's retry gets it.
	start := time.Now()
	call := &upstreamCall{Context: r.Context(), deadline: p.deadlines.get(start)}
	if o, ok := r.Context().Value(outcomeKey{}).(*upstreamOutcome); ok {
		// From here the effect may happen: a drain keeps the claim from lapsing until the
		// call's deadline has passed.
		dl, _ := call.deadline.Deadline()
		p.drain.begin(o, dl)
	}
	p.metrics.InFlight.Inc()
	returned := false
	defer func() {
		p.metrics.InFlight.Dec()
		if !returned {
			// The answer broke off after it began (the upstream cut it, the timeout fired
			// mid-body, or the client went away while it streamed): ReverseProxy aborts with
			// http.ErrAbortHandler, which goes on to the middleware; the claim is held, or the
			// record completed without its body, never released. The call counts as failed.
			p.metrics.upstream(time.Since(start), true)
			record(r, uncertain)
		}
	}()
	p.rp.ServeHTTP(w, r.WithContext(call))
	returned = true
	p.metrics.upstream(time.Since(start), call.failure != 0)
	if call.failure != 0 {
		record(r, call.failure)
	}
}

// upstreamError answers when the upstream call failed: 502, or 504 on a timeout. A request
// that never left is marked failed (the claim is released: a retry executes); one that was sent
// without an answer is marked uncertain (the claim is held: never a silent second execution).
func (p *proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	f := classify(err)
	if call, ok := r.Context().Value(callKey{}).(*upstreamCall); ok {
		call.failure = f
	}
	if f == uncertain && p.drain.cut.Load() && errors.Is(err, context.Canceled) {
		idemhttp.MarkUncertain(w)
		p.log.Warn("upstream call cut: the gateway's drain ended", "method", r.Method, "path", r.URL.Path)
		p.format.Write(w, idemhttp.Problem{Status: http.StatusServiceUnavailable, Type: ProblemShuttingDown,
			Title: "The gateway shut down before the upstream answered; the request may have been processed. Retry with the same key later."})
		return
	}
	status, title := http.StatusBadGateway, "The upstream could not be reached; nothing was sent."
	if f == uncertain {
		idemhttp.MarkUncertain(w)
		title = "The upstream did not answer; the request may have been processed. Retry with the same key later."
		if errors.Is(err, context.DeadlineExceeded) {
			status = http.StatusGatewayTimeout
		}
	} else {
		idemhttp.MarkFailed(w)
	}
	p.log.Warn("upstream call failed", "method", r.Method, "path", r.URL.Path, "err", err, "maybe_processed", f == uncertain)
	p.format.Write(w, idemhttp.Problem{Status: status, Type: ProblemUpstream, Title: title})
}
