package idemclient

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/retry"
)

// ErrBodyNotReplayable: the request needed a retry but its body cannot be sent again (it has
// no GetBody). The request was sent once; use a body type that http.NewRequest knows
// (bytes.Reader, bytes.Buffer, strings.Reader) or set GetBody.
var ErrBodyNotReplayable = errors.New("idemclient: request needs a retry but its body cannot be replayed")

// ErrAttemptTimeout marks an attempt cut short by Options.AttemptTimeout: the request may or
// may not have reached the server, which is the case the key exists for, so the Transport
// retries it with the same key. The error that net/http returned is in the chain too.
var ErrAttemptTimeout = errors.New("idemclient: attempt timed out")

// ErrGaveUp wraps the last error when the Transport stops retrying (attempts, time or budget
// exhausted). The last error is in the chain too.
var ErrGaveUp = errors.New("idemclient: gave up retrying")

// Options configure a Transport. The zero value is a safe default for every field.
type Options struct {
	// Base sends each attempt. Default http.DefaultTransport.
	Base http.RoundTripper
	// Methods get an Idempotency-Key and are retried. Default POST and PATCH. Requests with
	// other idempotent methods (GET, HEAD, OPTIONS, PUT, DELETE, TRACE) are retried without a
	// key; any other request is sent once, unless the caller set a key on it.
	Methods []string
	// MaxAttempts caps the attempts per request, the first included. Default 5.
	MaxAttempts int
	// BaseDelay is the backoff before the first retry; it doubles with each retry. Default 100ms.
	BaseDelay time.Duration
	// MaxDelay caps one backoff delay. Default 5s. A larger Retry-After is still honoured if it
	// fits in MaxElapsed.
	MaxDelay time.Duration
	// MaxElapsed caps the total time of a request, retries included. Default 30s. The
	// request's context deadline, if earlier, wins. A pause (backoff or Retry-After) that would
	// end too late is shortened so that one more attempt starts at the last useful moment: the
	// end of the budget less AttemptTimeout (at most half the budget), or less a tenth of the
	// budget when AttemptTimeout is not set. Past that moment the Transport gives up.
	MaxElapsed time.Duration
	// AttemptTimeout bounds one attempt: sending, waiting for the answer's headers and reading
	// its body. Default 0: no bound besides the request's context. An attempt that times out
	// may or may not have reached the server, so it is retried with the same key; its error
	// matches ErrAttemptTimeout. When it is set, the Transport reads the body of the answer it
	// returns within the attempt (up to 8 MiB; a larger body is handed over as it streams,
	// still bounded by AttemptTimeout), so an answer cut short or stalled mid-body is retried
	// too. http.Transport.ResponseHeaderTimeout on Base bounds the wait for headers only; its
	// timeouts are retried as well.
	AttemptTimeout time.Duration
	// RetryBudget is the retry budget; nil means no budget (retries limited only by the caps).
	RetryBudget *RetryBudget
	// NewKey mints a key for a request that has none. Default NewKey (UUIDv7).
	NewKey func() string
	// OnEvent, if set, is called for each attempt, retry and give-up (for metrics and logs).
	OnEvent func(Event)
}

// EventKind says what happened.
type EventKind uint8

const (
	// EventAttempt: an attempt's outcome is known (Status or Err set).
	EventAttempt EventKind = iota + 1
	// EventRetry: the Transport will retry after Delay.
	EventRetry
	// EventGiveUp: the Transport stops retrying a request that needed a retry.
	EventGiveUp
)

// String returns "attempt", "retry" or "give_up".
func (k EventKind) String() string {
	switch k {
	case EventAttempt:
		return "attempt"
	case EventRetry:
		return "retry"
	case EventGiveUp:
		return "give_up"
	}
	return "unknown"
}

// Event describes one step of a request, for Options.OnEvent.
type Event struct {
	Kind    EventKind
	Method  string
	URL     string
	Key     string        // the idempotency key, or "" for requests sent without one
	Attempt int           // 1 for the first attempt
	Status  int           // the attempt's status, 0 on a network error
	Err     error         // the attempt's error, or why the Transport gave up
	Delay   time.Duration // for EventRetry: the pause before the next attempt
}

// Transport is a retrying http.RoundTripper. Create it with New; it is safe for concurrent use.
type Transport struct {
	opt     Options
	sched   retry.Schedule
	methods map[string]bool

	// For tests: the clock, the pause and the jitter source.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	rand  func(n int64) int64
}

// New returns a Transport. It fails with an *idem.OptionError (matching idem.ErrInvalidInput)
// naming the field if an option is out of range.
func New(opt Options) (*Transport, error) {
	opt.Base = cmp.Or[http.RoundTripper](opt.Base, http.DefaultTransport)
	if len(opt.Methods) == 0 {
		opt.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	sched := retry.Schedule{MaxAttempts: opt.MaxAttempts, BaseDelay: opt.BaseDelay, MaxDelay: opt.MaxDelay,
		MaxElapsed: opt.MaxElapsed, AttemptTimeout: opt.AttemptTimeout}
	if err := sched.Init("idemclient", "Options"); err != nil {
		return nil, err
	}
	opt.MaxAttempts, opt.BaseDelay, opt.MaxDelay, opt.MaxElapsed = sched.MaxAttempts, sched.BaseDelay, sched.MaxDelay, sched.MaxElapsed
	if opt.NewKey == nil {
		opt.NewKey = NewKey
	}
	t := &Transport{opt: opt, sched: sched, methods: make(map[string]bool), now: time.Now, sleep: retry.Sleep, rand: rand.Int64N}
	for _, m := range opt.Methods {
		t.methods[strings.ToUpper(m)] = true
	}
	return t, nil
}

// NewClient returns an *http.Client whose Transport is New(opt).
func NewClient(opt Options) (*http.Client, error) {
	t, err := New(opt)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: t}, nil
}

var idempotentMethods = []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodTrace}

// RoundTrip sends req, retrying as the Options allow. It never modifies req: attempts are
// sent on clones carrying the key.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	key := req.Header.Get(idem.KeyHeader)
	retryable := key != ""
	if key == "" && t.methods[req.Method] {
		if k, ok := KeyFrom(ctx); ok {
			key = k
		} else {
			key = t.opt.NewKey()
		}
		retryable = true
	}
	if !retryable && slices.Contains(idempotentMethods, req.Method) {
		retryable = true
	}
	if !retryable || t.opt.MaxAttempts == 1 {
		return t.opt.Base.RoundTrip(t.prepare(req, key, req.Body))
	}

	win := t.sched.Window(ctx, t.now())
	body := req.Body
	for attempt := 1; ; attempt++ {
		if attempt > 1 && req.GetBody != nil {
			var err error
			if body, err = req.GetBody(); err != nil {
				return nil, fmt.Errorf("idemclient: replaying the body: %w", err)
			}
		}
		resp, err := t.attempt(ctx, t.prepare(req, key, body))
		ev := Event{Method: req.Method, URL: req.URL.Redacted(), Key: key, Attempt: attempt, Err: err}
		if resp != nil {
			ev.Status = resp.StatusCode
		}
		t.emit(ev, EventAttempt)

		wait, again := t.shouldRetry(ctx, resp, err)
		if !again {
			if attempt == 1 && err == nil {
				t.opt.RetryBudget.succeed()
			}
			return resp, err
		}
		why := describe(resp, err)
		if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
			return t.giveUp(ev, resp, fmt.Errorf("%w (%s)", ErrBodyNotReplayable, why))
		}
		if attempt >= t.opt.MaxAttempts {
			return t.giveUp(ev, resp, fmt.Errorf("%w after %d attempts: %s", ErrGaveUp, attempt, why))
		}
		// The pause asked for (or drawn) may end past the last useful moment: then the next
		// attempt starts at that moment. A Retry-After is an estimate of when the answer will
		// exist; giving up without asking again would lose an answer that came early.
		delay, ok := win.Pause(t.now(), t.sched.Backoff(attempt, t.rand), wait)
		if !ok {
			return t.giveUp(ev, resp, fmt.Errorf("%w: no time left for attempt %d within %s: %s", ErrGaveUp, attempt+1, win.Deadline.Sub(win.Start).Round(time.Millisecond), why))
		}
		if !t.opt.RetryBudget.take() {
			return t.giveUp(ev, resp, fmt.Errorf("%w: retry budget exhausted: %s", ErrGaveUp, why))
		}
		ev.Delay = delay
		t.emit(ev, EventRetry)
		if resp != nil {
			drain(resp)
		}
		if err := t.sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// maxBuffered is the largest body the Transport reads within an attempt bounded by
// AttemptTimeout.
const maxBuffered = 8 << 20

// attempt sends one attempt. With an AttemptTimeout it runs under its own deadline, reads the
// answer's body within it, and marks a timeout with ErrAttemptTimeout.
func (t *Transport) attempt(ctx context.Context, req *http.Request) (*http.Response, error) {
	if t.opt.AttemptTimeout <= 0 {
		return t.opt.Base.RoundTrip(req)
	}
	actx, cancel := context.WithTimeout(ctx, t.opt.AttemptTimeout)
	timedOut := func(err error) error {
		if ctx.Err() == nil && actx.Err() != nil {
			return fmt.Errorf("%w after %s: %w", ErrAttemptTimeout, t.opt.AttemptTimeout, err)
		}
		return err
	}
	resp, err := t.opt.Base.RoundTrip(req.WithContext(actx))
	if err != nil {
		cancel()
		return nil, timedOut(err)
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxBuffered+1))
	if err != nil {
		resp.Body.Close()
		cancel()
		return nil, timedOut(fmt.Errorf("idemclient: reading the answer (status %d): %w", resp.StatusCode, err))
	}
	if len(buf) <= maxBuffered {
		resp.Body.Close()
		cancel()
		resp.Body = io.NopCloser(bytes.NewReader(buf))
		resp.ContentLength = int64(len(buf))
		return resp, nil
	}
	resp.Body = &streamed{Reader: io.MultiReader(bytes.NewReader(buf), resp.Body), body: resp.Body, cancel: cancel}
	return resp, nil
}

// streamed is the body of a large answer: the part read within the attempt, then the rest,
// still under the attempt's deadline until it is closed.
type streamed struct {
	io.Reader
	body   io.Closer
	cancel context.CancelFunc
}

func (s *streamed) Close() error {
	err := s.body.Close()
	s.cancel()
	return err
}

// prepare returns the request to send for one attempt: a shallow clone with the key set and
// the given body, so the caller's request is never modified.
func (t *Transport) prepare(req *http.Request, key string, body io.ReadCloser) *http.Request {
	if key == "" || req.Header.Get(idem.KeyHeader) == key {
		if body == req.Body {
			return req
		}
		r := req.Clone(req.Context())
		r.Body = body
		return r
	}
	r := req.Clone(req.Context())
	r.Header.Set(idem.KeyHeader, key)
	r.Body = body
	return r
}

// giveUp reports the end of retries. With a last response in hand it is returned as it is
// (the caller sees the server's answer, e.g. its 503); after a network error, or when the body
// could not be replayed, the error is returned.
func (t *Transport) giveUp(ev Event, resp *http.Response, err error) (*http.Response, error) {
	ev.Err = err
	t.emit(ev, EventGiveUp)
	if resp != nil && !errors.Is(err, ErrBodyNotReplayable) {
		return resp, nil
	}
	if resp != nil {
		drain(resp)
	}
	return nil, err
}

func (t *Transport) emit(ev Event, kind EventKind) {
	if t.opt.OnEvent != nil {
		ev.Kind = kind
		t.opt.OnEvent(ev)
	}
}

// shouldRetry decides whether an attempt's outcome is worth another attempt, and the least
// pause the server asked for.
func (t *Transport) shouldRetry(ctx context.Context, resp *http.Response, err error) (wait time.Duration, again bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	if err != nil {
		return 0, Retryable(err)
	}
	switch code := resp.StatusCode; {
	case code == http.StatusConflict:
		// Only the in-flight 409 of an idempotency layer, which says when to come back.
		if ra, ok := retryAfter(resp.Header.Get("Retry-After"), t.now()); ok {
			return ra, true
		}
		return 0, false
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests,
		code >= 500 && code != http.StatusNotImplemented && code != http.StatusHTTPVersionNotSupported:
		ra, _ := retryAfter(resp.Header.Get("Retry-After"), t.now())
		return ra, true
	}
	return 0, false
}

// Retryable reports whether an attempt that failed with err is worth another attempt carrying
// the same idempotency key, in the style of pgconn.SafeToRetry. It judges the error alone: the
// caller's own context is checked apart (the Transport never retries once the request's context
// is done, whatever the error), because a per-attempt timeout and the caller's deadline can
// both match context.DeadlineExceeded.
//
// True, because the request may or may not have arrived and the key makes a second arrival
// harmless:
//   - ErrAttemptTimeout (Options.AttemptTimeout);
//   - any error in the chain that has a Timeout() bool method returning true, other than
//     context.DeadlineExceeded itself and *url.Error (looked through): net/http's
//     ResponseHeaderTimeout and TLS handshake timeouts, dial and i/o timeouts,
//     os.ErrDeadlineExceeded;
//   - *net.OpError (a failed dial, read or write), and the syscall errors ECONNRESET,
//     ECONNREFUSED, ECONNABORTED, EPIPE, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH;
//   - a *net.DNSError that is a timeout or temporary;
//   - io.EOF and io.ErrUnexpectedEOF (a connection closed before or during the answer, as a
//     server does to a reused keep-alive connection);
//   - an HTTP/2 stream error (RST_STREAM: REFUSED_STREAM, CANCEL, INTERNAL_ERROR, …). net/http's
//     stream error type is unexported; it converts itself, through errors.As, to any struct
//     with the same fields, so it is matched by that shape rather than by its text.
//
// False for nil, context.Canceled, a bare context.DeadlineExceeded (the caller's deadline),
// ErrBodyNotReplayable, and every other error: a bad URL, an unsupported scheme, a certificate
// the client refuses — errors that another attempt would meet again.
func Retryable(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrAttemptTimeout):
		return true
	case errors.Is(err, context.Canceled), errors.Is(err, ErrBodyNotReplayable):
		return false
	case isTimeout(err):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	}
	for _, errno := range retryableErrnos {
		if errors.Is(err, errno) {
			return true
		}
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsTimeout || dns.IsTemporary
	}
	var stream h2StreamError
	return errors.As(err, &stream)
}

var retryableErrnos = []error{syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.ECONNABORTED,
	syscall.EPIPE, syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH}

// h2StreamError has the shape of an HTTP/2 stream error (net/http's bundled one, and
// golang.org/x/net/http2.StreamError, convert themselves to it through errors.As).
type h2StreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (e h2StreamError) Error() string {
	return fmt.Sprintf("stream error: stream ID %d; code %d", e.StreamID, e.Code)
}

// isTimeout reports whether the chain holds a timeout that is not the context's own deadline
// (the caller's, checked apart). It follows single-error chains and joined errors.
func isTimeout(err error) bool {
	for err != nil {
		if err == context.DeadlineExceeded {
			return false
		}
		if _, isURL := err.(*url.Error); !isURL {
			if te, ok := err.(interface{ Timeout() bool }); ok && te.Timeout() {
				return true
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if isTimeout(e) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, 1<<30)) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(0, at.Sub(now)), true
	}
	return 0, false
}

func describe(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return "status " + strconv.Itoa(resp.StatusCode)
}

// drain reads a little of a response we are discarding, so its connection can be reused.
func drain(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}
