package idemhttp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// ErrHijackNotSupported is returned by Hijack on the writer the middleware gives a handler:
// a hijacked connection's bytes cannot be captured and replayed. Routes that hijack (WebSocket
// upgrades) must not be processed by the middleware.
var ErrHijackNotSupported = errors.New("idemhttp: Hijack is not supported under the idempotency middleware")

// mark is what the handler said about its outcome (MarkFailed, MarkUncertain).
type mark uint8

const (
	markNone mark = iota
	markFailed
	markUncertain
)

var (
	errMarkedFailed    = errors.New("idemhttp: handler marked the request as failed")
	errMarkedUncertain = errors.New("idemhttp: handler marked the outcome as uncertain")
	errAborted         = errors.New("idemhttp: handler panicked after it began to answer")
)

// captureWriter is the http.ResponseWriter a handler gets under the middleware. It buffers the
// response, up to Options.MaxResponseBody, so that:
//   - the stored copy is exactly what the client got;
//   - a panic before anything was sent turns into a clean 500, not a partial answer;
//   - the result is stored before the client sees it, so a retry after the answer replays.
//
// It commits (sends status and headers, and what is buffered) early only when the handler
// flushes or the body outgrows the limit; from then on writes go through at once.
type captureWriter struct {
	w      http.ResponseWriter
	m      *middleware
	buf    *[]byte // pooled with the capture; the body kept for replay
	reqBuf *[]byte // pooled with the capture; the request body
	held   int64   // bytes charged to the memory budget (Options.MemoryBudget)

	status    int
	committed bool   // status and headers sent to w
	omitted   bool   // body outgrew the limit: not kept
	ran       bool   // the handler was called
	gone      bool   // a write to the client failed: it went away mid-answer
	panicked  any    // what a handler that had begun to answer panicked with
	stack     []byte // where it panicked (not for http.ErrAbortHandler)
	mark      mark
	stored    http.Header // headers to store, snapshot at commit
	body      bodyReader  // the request body handed to the handler

	// The execution under the claim (run).
	h    *handler
	r    *http.Request
	took time.Duration
	fn   idem.Func // c.run, made once per pooled capture: a method value per request allocates
}

var captures = sync.Pool{New: func() any {
	c := new(captureWriter)
	c.fn = c.run
	return c
}}

// Header returns the response header map: the handler sets headers on the real one.
func (c *captureWriter) Header() http.Header { return c.w.Header() }

// WriteHeader records the status. Informational (1xx) statuses other than 101 go to the
// client at once and are not stored.
func (c *captureWriter) WriteHeader(code int) {
	if c.status != 0 {
		return // superfluous, as net/http ignores it
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		c.w.WriteHeader(code)
		return
	}
	c.status = code
}

// Write buffers p, or sends it if the response is committed.
func (c *captureWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if !c.omitted {
		if c.room(len(p)) {
			*c.buf = append(*c.buf, p...)
			if !c.committed {
				return len(p), nil
			}
			return c.send(p)
		}
		// Too large to keep (MaxResponseBody, MemoryBudget): send what is held, then stream
		// the rest.
		if !c.committed {
			c.commit()
		}
		c.omitted = true
		*c.buf = (*c.buf)[:0]
	}
	return c.send(p)
}

// send writes p to the client, noting whether the client is gone.
func (c *captureWriter) send(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil {
		c.gone = true
	}
	return n, err
}

// WriteString is Write for a string.
func (c *captureWriter) WriteString(s string) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if !c.omitted && !c.committed && c.room(len(s)) {
		*c.buf = append(*c.buf, s...)
		return len(s), nil
	}
	return c.Write([]byte(s))
}

// room reports whether n more bytes of response may be kept: within MaxResponseBody and, when
// the buffer must grow, within the memory budget. It grows the buffer, doubling, to at most
// MaxResponseBody.
func (c *captureWriter) room(n int) bool {
	b := *c.buf
	need := int64(len(b)) + int64(n)
	if need <= int64(cap(b)) {
		return need <= c.m.opt.MaxResponseBody
	}
	if need > c.m.opt.MaxResponseBody {
		return false
	}
	size := min(max(2*int64(cap(b)), need), c.m.opt.MaxResponseBody)
	if !c.m.budget.take(&c.held, size-int64(cap(b))) {
		return false
	}
	nb := make([]byte, len(b), size)
	copy(nb, b)
	*c.buf = nb
	return true
}

// Flush flushes to the client once the response is being streamed (its body outgrew
// Options.MaxResponseBody). Before that it does nothing: the response is sent only after it is
// stored, so a client can never hold an answer that a crash then loses and a retry replaces
// with another (a reverse proxy flushes every chunk of a response of unknown length).
func (c *captureWriter) Flush() {
	if !c.committed {
		return
	}
	if f, ok := c.w.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack is not supported under capture; it returns ErrHijackNotSupported.
func (c *captureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, ErrHijackNotSupported
}

// Unwrap returns the underlying writer, for http.ResponseController (deadlines, full duplex).
// ResponseController's Flush and Hijack use the captureWriter's own methods.
func (c *captureWriter) Unwrap() http.ResponseWriter { return c.w }

// commit snapshots the headers to store and sends status, headers and the buffered body.
func (c *captureWriter) commit() {
	c.committed = true
	h := c.w.Header()
	c.sniff(h)
	c.stored = c.m.storedHeader(h, false) // a snapshot: h may change after it is sent
	if c.m.opt.ExpiresHeader && c.m.keeps(c.status) {
		h[ExpiresHeader] = []string{c.m.now().Add(c.m.ttl).UTC().Format(http.TimeFormat)}
	}
	c.w.WriteHeader(c.status)
	if len(*c.buf) > 0 {
		_, _ = c.send(*c.buf)
	}
}

// sniff sets Content-Type as net/http would if the handler did not, so that the stored
// headers, and every replay, carry the type the first client got.
func (c *captureWriter) sniff(h http.Header) {
	if _, ok := h["Content-Type"]; ok || len(*c.buf) == 0 || c.status == http.StatusNoContent || c.status == http.StatusNotModified {
		return
	}
	if _, ok := h["Transfer-Encoding"]; ok {
		return
	}
	h["Content-Type"] = []string{http.DetectContentType(*c.buf)}
}

// MarkFailed tells the middleware, from a handler, that its request had no effect whatever the
// status it writes (say, an upstream that could not be reached): the claim is released so a
// retry executes, and nothing is stored. It reports whether w is the middleware's writer (or
// wraps it, through Unwrap).
func MarkFailed(w http.ResponseWriter) bool { return setMark(w, markFailed) }

// MarkUncertain tells the middleware, from a handler, that its request may or may not have had
// its effect (say, an upstream that timed out after the request was sent): nothing is stored and
// the claim is held as the engine's idem.UncertainPolicy says, so a retry is never a silent second
// execution. It reports whether w is the middleware's writer (or wraps it, through Unwrap).
func MarkUncertain(w http.ResponseWriter) bool { return setMark(w, markUncertain) }

func setMark(w http.ResponseWriter, m mark) bool {
	for range 32 {
		switch x := w.(type) {
		case *captureWriter:
			if m > x.mark {
				x.mark = m
			}
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return false
		}
	}
	return false
}

// bodyReader is the request body handed to the handler: the bytes the middleware read, in a
// bytes.Reader behind io.NopCloser. net/http's client knows that pair to be in memory, so a
// handler that forwards the body (a reverse proxy) sends headers and body in one write, not two.
type bodyReader struct {
	b  []byte
	r  bytes.Reader
	rc io.ReadCloser // io.NopCloser(&r), made once per capture writer
}

// open returns the body, read from its start; detached, a reader and bytes of its own
// (Options.DetachBody).
func (r *bodyReader) open(detached bool) io.ReadCloser {
	if detached {
		return io.NopCloser(bytes.NewReader(bytes.Clone(r.b)))
	}
	if r.rc == nil {
		r.rc = io.NopCloser(&r.r)
	}
	r.r.Reset(r.b)
	return r.rc
}

// serveUnprotected runs next for a request whose body the capture read but that the middleware
// does not protect (no key, fail open). If next panics or exits its goroutine, the capture's
// memory is given back to the budget here: the capture is then never released to its pool.
func (c *captureWriter) serveUnprotected(next http.Handler, w http.ResponseWriter, r *http.Request) {
	ok := false
	defer func() {
		if !ok {
			c.m.budget.give(&c.held)
		}
	}()
	next.ServeHTTP(w, r)
	ok = true
}

// Buffers for request and response bodies. Buffers that grew beyond maxPooled are dropped,
// so the memory of a burst of large bodies goes back to the garbage collector, not to a pool.
const maxPooled = 64 << 10

// minBodyBuf is the least size a request body buffer grows to.
const minBodyBuf = 4 << 10

var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

func getBuf() *[]byte { return bufs.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > maxPooled {
		return
	}
	*b = (*b)[:0]
	bufs.Put(b)
}
