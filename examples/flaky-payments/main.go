// Command flaky-payments pays through a network that loses the first answer, with idemclient
// on the client side and idemhttp on the server: the client retries with the same
// Idempotency-Key, gets the original answer, and the card is charged once.
//
//	go run ./examples/flaky-payments
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

func main() {
	// The payments API: it knows nothing of idempotency.
	var charges atomic.Int32
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d","amount":1000}`, n)
	})
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idemhttp.New(idemhttp.Options{
		Runner: eng,
		Scope:  idemhttp.SingleCaller(), // one client in this demo; scope by the caller's identity when there are more
	})
	if err != nil {
		log.Fatal(err)
	}
	server := httptest.NewServer(mw(api))
	defer server.Close()

	// The network: the first answer is lost after the server has charged the card.
	var requests atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, _ := http.NewRequest(r.Method, server.URL+r.URL.Path, r.Body)
		out.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if requests.Add(1) == 1 {
			fmt.Println("network: the server answered", resp.Status, "but the answer is lost")
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}))
	defer flaky.Close()

	client, err := idemclient.NewClient(idemclient.Options{
		BaseDelay: 50 * time.Millisecond,
		OnEvent: func(e idemclient.Event) {
			if e.Kind == idemclient.EventRetry {
				fmt.Printf("client: attempt %d failed (%v); retrying with the same key %s\n", e.Attempt, e.Err, e.Key)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := client.Post(flaky.URL+"/v1/charges", "application/json", strings.NewReader(`{"amount":1000}`))
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("client: %s %s (replayed: %s)\n", resp.Status, body, resp.Header.Get("Idempotent-Replayed"))
	fmt.Printf("the card was charged %d time(s)\n", charges.Load())
}
