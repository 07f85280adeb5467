// Command gorilla puts idemhttp on a gorilla/mux router. The middleware is a
// func(http.Handler) http.Handler, which is what mux.MiddlewareFunc is, so a subrouter's Use
// takes it as it is: here it protects the /v1 payment routes and nothing else. Run it to see
// the answers; pass -listen to serve instead.
//
//	cd examples/routers && go run ./gorilla
//	cd examples/routers && go run ./gorilla -listen 127.0.0.1:8080
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

	"github.com/gorilla/mux"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// api is the payments API: it counts the charges it made.
type api struct {
	charges atomic.Int64
}

// router returns the mux router of the API, with idemhttp on the /v1 subrouter.
// scopeSecret keys the HMAC that turns the caller's API key into its scope, so that stored
// scopes cannot be tested against guesses of API keys. In a real service it comes from a secret
// store, the same for every server that shares the idem store.
var scopeSecret = []byte("example scope secret of 32 bytes")

func (a *api) router(eng *idem.Engine) (http.Handler, error) {
	mw, err := idemhttp.New(idemhttp.Options{Runner: eng, Scope: idemhttp.KeyedHeaderScope("Authorization", scopeSecret)})
	if err != nil {
		return nil, err
	}
	r := mux.NewRouter()
	v1 := r.PathPrefix("/v1").Subrouter()
	v1.Use(mw)
	v1.HandleFunc("/charges", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d","request":%s}`, a.charges.Add(1), body)
	}).Methods(http.MethodPost)
	v1.HandleFunc("/charges", func(w http.ResponseWriter, r *http.Request) { // GET: passes through
		fmt.Fprintf(w, `{"count":%d}`, a.charges.Load())
	}).Methods(http.MethodGet)
	r.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { // outside the subrouter
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
		fmt.Printf("%-4s %s replayed=%q %s\n", method, resp.Status, resp.Header.Get("Idempotent-Replayed"), b)
	}
	send("POST", `{"amount":1000}`, "Authorization", "Bearer sk_alice", "Idempotency-Key", "a1")
	send("POST", `{"amount":1000}`, "Authorization", "Bearer sk_alice", "Idempotency-Key", "a1")
	send("POST", `{"amount":9999}`, "Authorization", "Bearer sk_alice", "Idempotency-Key", "a1") // another body
	send("GET", "")
	fmt.Println("charges:", a.charges.Load())
}
