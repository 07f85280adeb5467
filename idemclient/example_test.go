package idemclient_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/idemclient"
)

// A POST that fails twice with 503 is retried with the same Idempotency-Key.
func Example() {
	var attempts atomic.Int32
	keys := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys[r.Header.Get("Idempotency-Key")] = true
		if attempts.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	client, _ := idemclient.NewClient(idemclient.Options{BaseDelay: time.Millisecond})
	resp, err := client.Post(srv.URL+"/charges", "application/json", strings.NewReader(`{"amount":1000}`))
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", attempts.Load(), "attempts with", len(keys), "key")
	// Output: 201 after 3 attempts with 1 key
}

// IntentKey gives the same key to every retry of one business intent, even across restarts.
func ExampleIntentKey() {
	secret := []byte("keep me in your secret store")
	k1 := idemclient.IntentKey(secret, "charge", "order-1001")
	k2 := idemclient.IntentKey(secret, "charge", "order-1001")
	fmt.Println(k1 == k2, len(k1))
	// Output: true 43
}

// WithKey fixes the key of one request, e.g. a key stored with the user's intent.
func ExampleWithKey() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("key:", r.Header.Get("Idempotency-Key"))
	}))
	defer srv.Close()
	client, _ := idemclient.NewClient(idemclient.Options{})
	ctx := idemclient.WithKey(context.Background(), "order-1001/charge")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	// Output: key: order-1001/charge
}
