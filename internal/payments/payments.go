// Package payments is a tiny payments API used by `idem demo` and the end-to-end tests: it
// knows nothing of idempotency, so every POST that reaches it makes a new charge.
package payments

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// Charge is one charge the API made.
type Charge struct {
	ID       string    `json:"id"`
	Amount   int64     `json:"amount"`
	Currency string    `json:"currency"`
	Created  time.Time `json:"created"`
}

// API is the payments API. Its zero value is not usable; call New.
type API struct {
	mu      sync.Mutex
	charges []Charge
	// Delay, if set, is how long each charge takes (to show in-flight duplicates).
	Delay time.Duration
	mux   *http.ServeMux
}

// New returns an API with no charges.
func New() *API {
	a := &API{mux: http.NewServeMux()}
	a.mux.HandleFunc("POST /v1/charges", a.create)
	a.mux.HandleFunc("GET /v1/charges", a.list)
	return a
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// Count returns how many charges were made.
func (a *API) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.charges)
}

func (a *API) create(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&in); err != nil || in.Amount <= 0 || len(in.Currency) != 3 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"want {\"amount\": >0, \"currency\": \"eur\"}"}` + "\n"))
		return
	}
	if a.Delay > 0 {
		time.Sleep(a.Delay)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	c := Charge{ID: "ch_" + hex.EncodeToString(id[:]), Amount: in.Amount, Currency: in.Currency, Created: time.Now().UTC().Truncate(time.Millisecond)}
	a.mu.Lock()
	a.charges = append(a.charges, c)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/charges/"+c.ID)
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(c)
}

func (a *API) list(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	out := struct {
		Count   int      `json:"count"`
		Charges []Charge `json:"charges"`
	}{len(a.charges), append([]Charge(nil), a.charges...)}
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}
