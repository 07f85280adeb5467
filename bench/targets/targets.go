package targets

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/idempotency"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// Body is the JSON every target answers with, status 201: a small payment.
var Body = []byte(`{"id":"ch_1","object":"charge","amount":1000,"currency":"eur","status":"succeeded"}`)

// StatsPath is the path at which an Upstream answers a GET with its Stats as JSON.
const StatsPath = "/__stats"

// Stats count what an Upstream served.
type Stats struct {
	// Requests counts the requests answered (StatsPath excluded).
	Requests int64 `json:"requests"`
	// MaxInFlight is the largest number of requests the upstream held at once.
	MaxInFlight int64 `json:"max_in_flight"`
}

// Upstream is the API behind the proxies: it reads the request body, waits Delay, and
// answers 201 with Body. It is safe for concurrent use.
type Upstream struct {
	// Delay is how long each answer waits, to hold requests in flight. Default 0.
	Delay time.Duration

	requests, inFlight, maxInFlight atomic.Int64
}

// ServeHTTP implements http.Handler.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == StatsPath {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Stats{Requests: u.requests.Load(), MaxInFlight: u.maxInFlight.Load()})
		return
	}
	n := u.inFlight.Add(1)
	for {
		m := u.maxInFlight.Load()
		if n <= m || u.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	_, _ = io.Copy(io.Discard, r.Body)
	if u.Delay > 0 {
		time.Sleep(u.Delay)
	}
	u.inFlight.Add(-1)
	u.requests.Add(1)
	writeBody(w)
}

var contentType = []string{"application/json"}
var contentLength = []string{strconv.Itoa(len(Body))}

func writeBody(w http.ResponseWriter) {
	h := w.Header()
	h["Content-Type"] = contentType
	h["Content-Length"] = contentLength
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(Body)
}

// BareHandler is the plain net/http handler of the middleware comparison: it reads the body and
// answers 201 with Body.
func BareHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		writeBody(w)
	})
}

// IdemHandler is BareHandler behind the idemhttp middleware, on a memstore, with the engine's
// local cache of completed records (cacheSize entries) serving replays. Everything else is
// idemhttp's and the engine's defaults.
func IdemHandler(cacheSize int) (http.Handler, error) {
	eng, err := idem.New(memstore.New(), idem.Options{CacheSize: cacheSize})
	if err != nil {
		return nil, err
	}
	mw, err := idemhttp.New(idemhttp.Options{Runner: eng, Scope: idemhttp.SingleCaller()})
	if err != nil {
		return nil, err
	}
	return mw(BareHandler()), nil
}

// BareProxy is the baseline of the gateway benchmark: a bare httputil.ReverseProxy to
// upstream, tuned as a Go proxy should be: upstream connections are reused (up to 1024 idle,
// where Go's default keeps 2 per host) and copy buffers come from a pool. It only rewrites
// the URL and sets the X-Forwarded-* headers.
func BareProxy(upstream *url.URL) http.Handler {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 1024,
			IdleConnTimeout:     90 * time.Second,
		},
		BufferPool: &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}},
	}
}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b *bufferPool) Put(x []byte) { b.p.Put(&x) }

// FiberApp returns a Fiber v2 app answering every POST with 201 and Body, behind Fiber's
// idempotency middleware (github.com/gofiber/fiber/v2/middleware/idempotency, its in-memory
// lock and storage, keyed on the Idempotency-Key header) when withIdempotency is set.
func FiberApp(withIdempotency bool) *fiber.App { return fiberApp(withIdempotency, nil) }

// fiberApp is FiberApp, calling ran (if not nil) each time the handler runs.
func fiberApp(withIdempotency bool, ran func()) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if withIdempotency {
		app.Use(idempotency.New(idempotency.Config{KeyHeader: "Idempotency-Key", Lifetime: 24 * time.Hour}))
	}
	app.Post("/*", func(c *fiber.Ctx) error {
		if ran != nil {
			ran()
		}
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Status(fiber.StatusCreated).Send(Body)
	})
	return app
}
