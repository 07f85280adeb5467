// Command gin puts idemhttp on a Gin router. Gin has no adapter for a net/http middleware, so
// a small one (wrap, below) runs the Gin chain as the middleware's next handler; it goes on a
// route group like any Gin middleware: here the /v1 payment routes, and nothing else. Run it
// to see the answers; pass -listen to serve instead.
//
//	cd examples/routers && go run ./gin
//	cd examples/routers && go run ./gin -listen 127.0.0.1:8080
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// wrap adapts a net/http middleware to Gin. The rest of the chain runs inside the middleware,
// writing through the middleware's ResponseWriter (which records the answer for replay) and
// seeing its request. When the middleware answers by itself (a replay, 409, 422, 400, 503),
// the chain does not run and is aborted.
// scopeSecret keys the HMAC that turns the caller's API key into its scope, so that stored
// scopes cannot be tested against guesses of API keys. In a real service it comes from a secret
// store, the same for every server that shares the idem store.
var scopeSecret = []byte("example scope secret of 32 bytes")

func wrap(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		ran := false
		mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			orig, origReq := c.Writer, c.Request
			c.Writer, c.Request = &responseWriter{ResponseWriter: orig, w: w}, r
			defer func() { c.Writer, c.Request = orig, origReq }()
			c.Next()
		})).ServeHTTP(c.Writer, c.Request)
		if !ran {
			c.Abort()
		}
	}
}

// responseWriter is a gin.ResponseWriter whose writes go to w, the middleware's writer; Gin's
// own bookkeeping (Status, Written, Size) comes from the writer underneath, which the
// middleware writes to in turn.
type responseWriter struct {
	gin.ResponseWriter
	w http.ResponseWriter
}

func (r *responseWriter) Header() http.Header               { return r.w.Header() }
func (r *responseWriter) WriteHeader(code int)              { r.w.WriteHeader(code) }
func (r *responseWriter) WriteHeaderNow()                   {}
func (r *responseWriter) Write(b []byte) (int, error)       { return r.w.Write(b) }
func (r *responseWriter) WriteString(s string) (int, error) { return io.WriteString(r.w, s) }
func (r *responseWriter) Flush()                            { http.NewResponseController(r.w).Flush() }
func (r *responseWriter) Unwrap() http.ResponseWriter       { return r.w }

// api is the payments API: it counts the charges it made.
type api struct {
	charges atomic.Int64
}

// router returns the Gin engine of the API, with idemhttp on the /v1 group.
func (a *api) router(eng *idem.Engine) (*gin.Engine, error) {
	mw, err := idemhttp.New(idemhttp.Options{Runner: eng, Scope: idemhttp.KeyedHeaderScope("Authorization", scopeSecret)})
	if err != nil {
		return nil, err
	}
	gin.SetMode(gin.ReleaseMode)
	g := gin.New()
	v1 := g.Group("/v1", wrap(mw))
	v1.POST("/charges", func(c *gin.Context) {
		body, err := io.ReadAll(c.Request.Body)
		if err != nil {
			c.AbortWithStatus(http.StatusBadRequest)
			return
		}
		c.Data(http.StatusCreated, "application/json", fmt.Appendf(nil, `{"charge":"ch_%d","request":%s}`, a.charges.Add(1), body))
	})
	v1.GET("/charges", func(c *gin.Context) { // GET: passes through
		c.JSON(http.StatusOK, gin.H{"count": a.charges.Load()})
	})
	g.GET("/healthz", func(c *gin.Context) { c.Status(http.StatusNoContent) }) // outside the group
	return g, nil
}

func main() {
	listen := flag.String("listen", "", "serve on this address instead of running the demo")
	flag.Parse()

	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var a api
	g, err := a.router(eng)
	if err != nil {
		log.Fatal(err)
	}
	if *listen != "" {
		log.Printf("serving on %s", *listen)
		log.Fatal(http.ListenAndServe(*listen, g))
	}

	srv := httptest.NewServer(g)
	defer srv.Close()
	send := func(method, body string, hdr ...string) {
		req, _ := http.NewRequest(method, srv.URL+"/v1/charges", strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%-4s %s replayed=%q %s\n", method, resp.Status, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
	}
	send("POST", `{"amount":1000}`, "Authorization", "Bearer sk_alice", "Idempotency-Key", "a1")
	send("POST", `{"amount":1000}`, "Authorization", "Bearer sk_alice", "Idempotency-Key", "a1")
	send("POST", `{"amount":9999}`, "Authorization", "Bearer sk_alice", "Idempotency-Key", "a1") // another body
	send("GET", "")
	fmt.Println("charges:", a.charges.Load())
}
