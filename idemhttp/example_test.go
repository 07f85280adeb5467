package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// The same POST sent twice with one key runs the handler once; the retry gets the first
// response, marked as replayed. Another body with that key is refused. Keys belong to the
// caller that sent them: the scope is the caller's API key, hashed under a secret kept apart
// from the store.
func Example() {
	eng, _ := idem.New(memstore.New(), idem.Options{})
	scopeSecret := []byte("from your secret store, 32 bytes") // the same for every server of the store
	mw, err := idemhttp.New(idemhttp.Options{
		Runner: eng,
		Scope:  idemhttp.KeyedHeaderScope("X-API-Key", scopeSecret), // whose key it is
	})
	if err != nil {
		panic(err)
	}

	charges := 0
	mux := http.NewServeMux()
	mux.Handle("POST /v1/charges", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, charges)
	})))

	post := func(body string) {
		req := httptest.NewRequest("POST", "/v1/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", `"order-1001"`)
		req.Header.Set("X-API-Key", "key_alice")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Body)
		fmt.Println(rec.Code, rec.Header().Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
	}
	post(`{"amount":1000}`)
	post(`{"amount":1000}`)
	post(`{"amount":2000}`)
	fmt.Println("charges:", charges)
	// Output:
	// 201  {"id":"ch_1"}
	// 201 true {"id":"ch_1"}
	// 422  {"type":"https://idemkit.dev/problems/mismatch","title":"This idempotency key was used with a different request","status":422}
	// charges: 1
}

// A webhook receiver keyed on the sender's event id, with tenants apart and the expiry
// advertised.
func ExampleJSONKey() {
	eng, _ := idem.New(memstore.New(), idem.Options{})
	mw, _ := idemhttp.New(idemhttp.Options{
		Runner:        eng,
		Key:           idemhttp.JSONKey("id"),
		RequireKey:    true,
		Fingerprint:   idemhttp.JSONFingerprint(),
		Scope:         idemhttp.HeaderScope("Stripe-Account"),
		ExpiresHeader: true,
	})
	handled := 0
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handled++ }))
	for _, body := range []string{`{"id":"evt_1","type":"charge.succeeded"}`, `{"type":"charge.succeeded", "id":"evt_1"}`} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/webhooks/stripe", strings.NewReader(body)))
		fmt.Println(rec.Code, rec.Header().Get("Idempotent-Replayed"), rec.Header().Get("Idempotency-Expires") != "")
	}
	fmt.Println("handled:", handled)
	// Output:
	// 200  true
	// 200 true true
	// handled: 1
}

// Events feed metrics: one per request, with its outcome.
func ExampleOptions_onEvent() {
	eng, _ := idem.New(memstore.New(), idem.Options{})
	counts := map[idemhttp.Outcome]int{}
	mw, _ := idemhttp.New(idemhttp.Options{Runner: eng, OnEvent: func(ev idemhttp.Event) { counts[ev.Outcome]++ }, Scope: idemhttp.SingleCaller()})
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, key := range []string{"a", "a", "", "\"bad"} {
		req := httptest.NewRequest("POST", "/", nil)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	fmt.Println(counts)
	// Output:
	// map[bypass:1 executed:1 invalid_key:1 replay:1]
}
