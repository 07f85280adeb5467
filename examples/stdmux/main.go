// Command stdmux puts idemhttp in front of a net/http ServeMux, with the embedded SQLite store,
// a scope per API key and the expiry header. Run it to see a POST sent twice and once more with
// another body; pass -listen to serve instead and try it with curl:
//
//	go run ./examples/stdmux
//	go run ./examples/stdmux -listen 127.0.0.1:8080
//	curl -i -X POST localhost:8080/v1/orders -H 'X-API-Key: k1' -H 'Idempotency-Key: o-1' -d '{"sku":"tea"}'
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/sqlitestore"
)

// scopeSecret keys the HMAC that turns the caller's API key into its scope, so that stored
// scopes cannot be tested against guesses of API keys. In a real service it comes from a secret
// store, the same for every server that shares the idem store.
var scopeSecret = []byte("example scope secret of 32 bytes")

func main() {
	listen := flag.String("listen", "", "serve on this address instead of running the demo")
	db := flag.String("db", "", "SQLite file (default: a temporary one)")
	flag.Parse()

	path := *db
	if path == "" {
		dir, err := os.MkdirTemp("", "idem-stdmux")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "idem.db")
	}
	st, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	eng, err := idem.New(st, idem.Options{TTL: 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	idempotent, err := idemhttp.New(idemhttp.Options{
		Runner:        eng,
		RequireKey:    true,
		Scope:         idemhttp.KeyedHeaderScope("X-API-Key", scopeSecret),
		ExpiresHeader: true,
		Logger:        slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}

	// The handler knows nothing of idempotency.
	var orders atomic.Int64
	createOrder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := orders.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/v1/orders/%d", n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d,"request":%s}`, n, body)
	})

	mux := http.NewServeMux()
	mux.Handle("POST /v1/orders", idempotent(createOrder))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })

	if *listen != "" {
		log.Printf("serving on %s", *listen)
		log.Fatal(http.ListenAndServe(*listen, mux))
	}

	srv := httptest.NewServer(mux)
	defer srv.Close()
	post := func(key, body string) {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/orders", strings.NewReader(body))
		req.Header.Set("X-API-Key", "demo-key")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s  replayed=%q  %s\n", resp.Status, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
	}
	post("order-1", `{"sku":"tea"}`)
	post("order-1", `{"sku":"tea"}`)
	post("order-1", `{"sku":"coffee"}`)
	fmt.Println("orders created:", orders.Load())
}
