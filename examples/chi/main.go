// Command chi puts idemhttp on a chi router: the middleware is a plain
// func(http.Handler) http.Handler, so it goes in r.Use or r.With like any other. Here it
// protects a route group of payment endpoints, and a webhook route keyed on the sender's
// delivery id. Run it to see the answers; pass -listen to serve instead.
//
//	go run ./examples/chi
//	go run ./examples/chi -listen 127.0.0.1:8080
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

	"github.com/go-chi/chi/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// api is the payments API: it counts the charges it made and the webhooks it handled.
type api struct {
	charges, deliveries atomic.Int64
}

// router returns the chi router of the API, with idemhttp on the /v1 group and on the webhook
// route, both sharing eng.
// scopeSecret keys the HMAC that turns the caller's API key into its scope, so that stored
// scopes cannot be tested against guesses of API keys. In a real service it comes from a secret
// store, the same for every server that shares the idem store.
var scopeSecret = []byte("example scope secret of 32 bytes")

func (a *api) router(eng *idem.Engine) (http.Handler, error) {
	payments, err := idemhttp.New(idemhttp.Options{Runner: eng, Scope: idemhttp.KeyedHeaderScope("Authorization", scopeSecret)})
	if err != nil {
		return nil, err
	}
	webhooks, err := idemhttp.New(idemhttp.Options{
		Runner:     eng,
		Key:        idemhttp.HeaderKey("X-GitHub-Delivery"),
		RequireKey: true,
		Scope:      idemhttp.SingleCaller(), // one sender: GitHub (check its X-Hub-Signature-256 in front of this route)
	})
	if err != nil {
		return nil, err
	}
	r := chi.NewRouter()
	r.Route("/v1", func(r chi.Router) {
		r.Use(payments)
		r.Post("/charges", func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"charge":"ch_%d","request":%s}`, a.charges.Add(1), body)
		})
		r.Get("/charges", func(w http.ResponseWriter, r *http.Request) { // GET: passes through
			fmt.Fprintf(w, `{"count":%d}`, a.charges.Load())
		})
	})
	r.With(webhooks).Post("/webhooks/github", func(w http.ResponseWriter, r *http.Request) {
		a.deliveries.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})
	return r, nil
}

func main() {
	listen := flag.String("listen", "", "serve on this address instead of running the demo")
	flag.Parse()

	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	var a api
	r, err := a.router(eng)
	if err != nil {
		log.Fatal(err)
	}
	if *listen != "" {
		log.Printf("serving on %s", *listen)
		log.Fatal(http.ListenAndServe(*listen, r))
	}

	srv := httptest.NewServer(r)
	defer srv.Close()
	send := func(method, path string, hdr ...string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"amount":1000}`))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%-4s %-17s %s replayed=%q %s\n", method, path, resp.Status, resp.Header.Get("Idempotent-Replayed"), b)
	}
	send("POST", "/v1/charges", "Authorization", "Bearer sk_alice", "Idempotency-Key", "a1")
	send("POST", "/v1/charges", "Authorization", "Bearer sk_alice", "Idempotency-Key", "a1")
	send("POST", "/v1/charges", "Authorization", "Bearer sk_bob", "Idempotency-Key", "a1") // another tenant
	send("GET", "/v1/charges")
	send("POST", "/webhooks/github", "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	send("POST", "/webhooks/github", "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	send("POST", "/webhooks/github")
	fmt.Println("charges:", a.charges.Load(), "deliveries handled:", a.deliveries.Load())
}
