// Command echo puts idemhttp on an Echo router. Echo adapts a net/http middleware with
// echo.WrapMiddleware, so the idempotency middleware goes on a route group like any Echo
// middleware: here the /v1 payment routes, and nothing else. Run it to see the answers; pass
// -listen to serve instead.
//
//	cd examples/routers && go run ./echo
//	cd examples/routers && go run ./echo -listen 127.0.0.1:8080
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

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// api is the payments API: it counts the charges it made.
type api struct {
	charges atomic.Int64
}

// router returns the Echo instance of the API, with idemhttp on the /v1 group.
// scopeSecret keys the HMAC that turns the caller's API key into its scope, so that stored
// scopes cannot be tested against guesses of API keys. In a real service it comes from a secret
// store, the same for every server that shares the idem store.
var scopeSecret = []byte("example scope secret of 32 bytes")

func (a *api) router(eng *idem.Engine) (*echo.Echo, error) {
	mw, err := idemhttp.New(idemhttp.Options{Runner: eng, Scope: idemhttp.KeyedHeaderScope("Authorization", scopeSecret)})
	if err != nil {
		return nil, err
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	v1 := e.Group("/v1", echo.WrapMiddleware(mw))
	v1.POST("/charges", func(c echo.Context) error {
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.Blob(http.StatusCreated, echo.MIMEApplicationJSON,
			fmt.Appendf(nil, `{"charge":"ch_%d","request":%s}`, a.charges.Add(1), body))
	})
	v1.GET("/charges", func(c echo.Context) error { // GET: passes through
		return c.JSON(http.StatusOK, map[string]int64{"count": a.charges.Load()})
	})
	e.GET("/healthz", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }) // outside the group
	return e, nil
}

func main() {
	listen := flag.String("listen", "", "serve on this address instead of running the demo")
	flag.Parse()

	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var a api
	e, err := a.router(eng)
	if err != nil {
		log.Fatal(err)
	}
	if *listen != "" {
		log.Printf("serving on %s", *listen)
		log.Fatal(e.Start(*listen))
	}

	srv := httptest.NewServer(e)
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
