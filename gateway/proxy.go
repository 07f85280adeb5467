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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// upstreamTransport returns a Transport tuned for one upstream host: connections are reused
// (Go's default keeps only 2 idle per host, which churns sockets under load) and time-boxed.
func upstreamTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
	}
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
	rp      *httputil.ReverseProxy
	timeout time.Duration
	log     *slog.Logger
	metrics *Metrics
}

// failureKey is the context key of the *upstreamFailure the gateway puts in each request, so
// the proxy can say how the upstream call failed and the event hook can count it.
type failureKey struct{}

func upstreamFailureOf(r *http.Request) *upstreamFailure {
	f, _ := r.Context().Value(failureKey{}).(*upstreamFailure)
	return f
}

func newProxy(upstream *url.URL, transport http.RoundTripper, timeout time.Duration, log *slog.Logger, m *Metrics) *proxy {
	p := &proxy{timeout: timeout, log: log, metrics: m}
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
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), p.timeout)
	defer cancel()
	start := time.Now()
	p.metrics.InFlight.Inc()
	defer p.metrics.InFlight.Dec()
	p.rp.ServeHTTP(w, r.WithContext(ctx))
	result := "ok"
	if f := upstreamFailureOf(r); f != nil && *f != 0 {
		result = "error"
	}
	p.metrics.UpstreamSeconds.WithLabelValues(result).Observe(time.Since(start).Seconds())
}

// upstreamError answers when the upstream call failed: 502, or 504 on a timeout. A request
// that never left is marked failed (the claim is released: a retry executes); one that was sent
// without an answer is marked uncertain (the claim is held: never a silent second execution).
func (p *proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	f := classify(err)
	if fp := upstreamFailureOf(r); fp != nil {
		*fp = f
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
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"type":"https://idemkit.dev/problems/upstream","title":"`+title+`","status":`+strconv.Itoa(status)+"}\n")
}
