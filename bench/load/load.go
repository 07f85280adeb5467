package load

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// Mode says which Idempotency-Key, if any, each request carries.
type Mode string

// The modes.
const (
	// NoKey sends requests without a key: the pass-through path of a gateway.
	NoKey Mode = "nokey"
	// NewKey sends a key never used before with every request: the execute-and-store path.
	NewKey Mode = "newkey"
	// Replay gives each client one key, used once before the measured window (not counted)
	// and then on every request: the replay path.
	Replay Mode = "replay"
)

// DefaultBody is the request body sent when Options.Body is nil: a small JSON payment.
var DefaultBody = []byte(`{"amount":1000,"currency":"eur","customer":"cus_123"}`)

// Options configure a Run. Only URL is required.
type Options struct {
	// URL receives every request. Required.
	URL string
	// Method of every request. Default POST.
	Method string
	// Body of every request. Default DefaultBody. Sent with Content-Type: application/json.
	Body []byte
	// Mode says which key each request carries. Default NoKey.
	Mode Mode
	// KeyHeader names the header carrying the key. Default Idempotency-Key.
	KeyHeader string
	// KeyPrefix starts every key; keys are KeyPrefix plus a counter, padded to 36 bytes (the
	// length of a UUID, which some middleware require). Default: 12 random hex digits and a
	// dash, so two runs never share a key. At most 20 bytes.
	KeyPrefix string
	// Clients is the number of concurrent clients, each with its own keep-alive connection,
	// sending one request after another. Default 64.
	Clients int
	// Duration bounds the measured window. Default 5s. The run also ends after Requests.
	Duration time.Duration
	// Requests, if positive, ends the run after this many requests have been sent.
	// Default 0: only Duration bounds the run.
	Requests int64
	// Warmup is a window before the measured one, with the same load, whose requests are not
	// counted. Default 0.
	Warmup time.Duration
	// Timeout bounds each request. Default 30s.
	Timeout time.Duration
	// Header is added to every request.
	Header http.Header
	// Client sends the requests. Default: an http.Client whose Transport keeps one idle
	// connection per client (MaxIdleConnsPerHost = Clients) and never compresses.
	Client *http.Client
	// H2C makes the default Client speak HTTP/2 without TLS (prior knowledge): the clients'
	// requests then share a few connections, as many at once on each as the server allows,
	// instead of holding one connection each. The server must accept h2c.
	H2C bool
}

// optionError returns the *idem.OptionError of an invalid field of Options: it matches
// idem.ErrInvalidInput and reads "load: invalid options: <field> <problem>".
func optionError(field, format string, args ...any) error {
	return &idem.OptionError{Package: "load", Field: field, Problem: fmt.Sprintf(format, args...)}
}

func (o Options) withDefaults() (Options, error) {
	o.Method = cmp.Or(o.Method, http.MethodPost)
	if o.Body == nil {
		o.Body = DefaultBody
	}
	o.Mode = cmp.Or(o.Mode, NoKey)
	o.KeyHeader = cmp.Or(o.KeyHeader, "Idempotency-Key")
	o.Clients = cmp.Or(o.Clients, 64)
	o.Duration = cmp.Or(o.Duration, 5*time.Second)
	o.Timeout = cmp.Or(o.Timeout, 30*time.Second)
	if o.KeyPrefix == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		o.KeyPrefix = hex.EncodeToString(b[:]) + "-"
	}
	switch {
	case o.URL == "":
		return o, optionError("Options.URL", "is required")
	case o.Mode != NoKey && o.Mode != NewKey && o.Mode != Replay:
		return o, optionError("Options.Mode", "%q is not nokey, newkey or replay", o.Mode)
	case o.Clients < 0 || o.Clients > 100_000:
		return o, optionError("Options.Clients", "%d is not between 1 and 100000", o.Clients)
	case o.Duration < 0 || o.Warmup < 0 || o.Timeout < 0 || o.Requests < 0:
		return o, optionError("Options.Duration", "%s, Warmup %s, Timeout %s and Requests %d must not be negative", o.Duration, o.Warmup, o.Timeout, o.Requests)
	case len(o.KeyPrefix) > 20:
		return o, optionError("Options.KeyPrefix", "%q is longer than 20 bytes", o.KeyPrefix)
	}
	if o.Client == nil {
		tr := &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
			MaxIdleConns:        o.Clients,
			MaxIdleConnsPerHost: o.Clients,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		}
		if o.H2C {
			tr.Protocols = new(http.Protocols)
			tr.Protocols.SetUnencryptedHTTP2(true)
		}
		o.Client = &http.Client{Transport: tr}
	}
	return o, nil
}

// Result is what a Run measured, in its measured window only.
type Result struct {
	// Requests counts the requests that got an answer or an error.
	Requests int64
	// Errors counts transport errors and answers with a status of 400 or more.
	Errors int64
	// Status counts answers by status code (transport errors under 0).
	Status map[int]int64
	// Replayed counts answers with Idempotent-Replayed: true.
	Replayed int64
	// Elapsed is the measured window's length.
	Elapsed time.Duration
	// Latency holds every request's latency, from sending to the last byte of the body.
	Latency Histogram
	// FirstError is the first transport error or error status seen, for diagnosis.
	FirstError string
}

// Throughput returns requests per second over the measured window.
func (r *Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// String summarises the result in one line.
func (r *Result) String() string {
	return fmt.Sprintf("%d req in %s = %.0f req/s, p50 %s p99 %s max %s, %d errors",
		r.Requests, r.Elapsed.Round(time.Millisecond), r.Throughput(),
		r.Latency.Quantile(0.5).Round(time.Microsecond), r.Latency.Quantile(0.99).Round(time.Microsecond),
		r.Latency.Max().Round(time.Microsecond), r.Errors)
}

// Run sends load to opt.URL until opt.Duration has passed or opt.Requests were sent, or ctx
// ends, and returns what it measured. It is bounded in time by Warmup + Duration + Timeout
// (plus the priming requests of Replay mode, each bounded by Timeout). It returns an error for
// invalid options, or when priming a Replay key fails; request failures are counted in
// Result.Errors, not returned.
func Run(ctx context.Context, opt Options) (*Result, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &runner{opt: opt, seq: new(atomic.Int64)}
	clients := make([]*client, opt.Clients)
	for i := range clients {
		clients[i] = &client{r: r, id: i, status: map[int]int64{}}
	}
	if opt.Mode == Replay {
		if err := r.prime(ctx, clients); err != nil {
			return nil, err
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	measureFrom := start.Add(opt.Warmup)
	deadline := measureFrom.Add(opt.Duration)
	r.measureFrom = measureFrom
	r.deadline = deadline
	stop := time.AfterFunc(time.Until(deadline), cancel)
	defer stop.Stop()

	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() { c.loop(ctx) })
	}
	wg.Wait()
	end := time.Now()

	res := &Result{Status: map[int]int64{}}
	var last time.Time
	for _, c := range clients {
		res.Requests += c.requests
		res.Errors += c.errors
		res.Replayed += c.replayed
		for s, n := range c.status {
			res.Status[s] += n
		}
		res.Latency.Merge(&c.lat)
		if res.FirstError == "" {
			res.FirstError = c.firstErr
		}
		if c.last.After(last) {
			last = c.last
		}
	}
	// The window ends at the deadline, or at the last answer when the request count or the
	// context ended the run first.
	stopAt := deadline
	if end.Before(stopAt) {
		stopAt = end
		if last.After(measureFrom) {
			stopAt = last
		}
	}
	res.Elapsed = stopAt.Sub(measureFrom)
	if opt.Transport() != nil {
		opt.Transport().CloseIdleConnections()
	}
	return res, nil
}

// Transport returns the Client's transport if it is an *http.Transport.
func (o Options) Transport() *http.Transport {
	if o.Client == nil {
		return nil
	}
	t, _ := o.Client.Transport.(*http.Transport)
	return t
}

type runner struct {
	opt         Options
	seq         *atomic.Int64 // keys handed out
	sent        atomic.Int64  // requests started in the measured window
	measureFrom time.Time
	deadline    time.Time
}

// key returns the n-th key of the run: KeyPrefix and n, zero-padded to 36 bytes.
func (r *runner) key(n int64) string {
	s := strconv.FormatInt(n, 10)
	pad := 36 - len(r.opt.KeyPrefix) - len(s)
	if pad < 0 {
		pad = 0
	}
	return r.opt.KeyPrefix + zeros[:pad] + s
}

const zeros = "000000000000000000000000000000000000"

// prime sends each client's replay key once, so that the measured requests are replays.
func (r *runner) prime(ctx context.Context, clients []*client) error {
	var wg sync.WaitGroup
	errs := make([]error, len(clients))
	sem := make(chan struct{}, 64)
	for i, c := range clients {
		c.key = r.key(r.seq.Add(1))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			status, _, err := c.do(ctx, c.key)
			if err == nil && status >= 400 {
				err = fmt.Errorf("status %d", status)
			}
			if err != nil {
				errs[i] = fmt.Errorf("load: priming replay key %s: %w", c.key, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

type client struct {
	r        *runner
	id       int
	key      string // Replay mode
	requests int64
	errors   int64
	replayed int64
	status   map[int]int64
	lat      Histogram
	firstErr string
	last     time.Time
}

func (c *client) loop(ctx context.Context) {
	o := &c.r.opt
	for ctx.Err() == nil {
		measured := !time.Now().Before(c.r.measureFrom)
		if measured && o.Requests > 0 && c.r.sent.Add(1) > o.Requests {
			return
		}
		key := ""
		switch o.Mode {
		case NewKey:
			key = c.r.key(c.r.seq.Add(1))
		case Replay:
			key = c.key
		}
		t0 := time.Now()
		status, replayed, err := c.do(ctx, key)
		t1 := time.Now()
		if err != nil && ctx.Err() != nil {
			return // cut off by the end of the run: not counted
		}
		if !measured || t1.After(c.r.deadline) {
			continue
		}
		c.requests++
		c.last = t1
		c.lat.Record(t1.Sub(t0))
		if err != nil {
			c.errors++
			c.status[0]++
			if c.firstErr == "" {
				c.firstErr = err.Error()
			}
			continue
		}
		c.status[status]++
		if replayed {
			c.replayed++
		}
		if status >= 400 {
			c.errors++
			if c.firstErr == "" {
				c.firstErr = "status " + strconv.Itoa(status)
			}
		}
	}
}

// do sends one request and reads its whole answer.
func (c *client) do(ctx context.Context, key string) (int, bool, error) {
	o := &c.r.opt
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, o.Method, o.URL, bytes.NewReader(o.Body))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range o.Header {
		req.Header[k] = v
	}
	if key != "" {
		req.Header.Set(o.KeyHeader, key)
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		return 0, false, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", err
}
