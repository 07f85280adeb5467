package console_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/store/memstore"
)

// A console over a store: every request needs its token.
func ExampleNew() {
	st := memstore.New()
	c, err := console.New(console.Options{Store: st, Token: "a-long-random-console-token"})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	w := httptest.NewRecorder()
	c.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	fmt.Println("without the token:", w.Code)

	w = httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer a-long-random-console-token")
	c.ServeHTTP(w, r)
	fmt.Println("with it:", w.Code)
	// Output:
	// without the token: 401
	// with it: 200
}

// Release applies the rules of `idem release`: a claim whose lease is live is released only
// with force.
func ExampleRelease() {
	ctx := context.Background()
	st := memstore.New()
	now := time.Now()
	res, _ := st.Reserve(ctx, idem.ReserveRequest{Key: "tenant|order-1", Fingerprint: idem.Fingerprint([]byte("body")), Now: now, Lease: time.Minute, TTL: time.Hour})

	_, err := console.Release(ctx, st, "tenant|order-1", res.Record.Token, false, now)
	fmt.Println(err != nil)
	_, err = console.Release(ctx, st, "tenant|order-1", res.Record.Token, true, now)
	rec, _ := st.Get(ctx, "tenant|order-1")
	fmt.Println(err, console.ConditionOf(rec, now))
	// Output:
	// true
	// <nil> released
}
