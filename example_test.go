package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// The same charge requested twice runs once; the duplicate gets the stored response.
func Example() {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		panic(err)
	}
	charge := func(context.Context) (idem.Response, error) {
		fmt.Println("charging the card")
		return idem.Response{Status: 201, Body: []byte(`{"charge":"ch_1"}`)}, nil
	}
	body := []byte(`{"amount":1000}`)
	for range 2 {
		res, err := eng.Do(context.Background(), "order-1001", idem.Fingerprint(body), charge)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Response.Status, string(res.Response.Body), "replayed:", res.Replayed)
	}
	// Output:
	// charging the card
	// 201 {"charge":"ch_1"} replayed: false
	// 201 {"charge":"ch_1"} replayed: true
}

// A key reused for a different request is refused, and nothing runs.
func ExampleEngine_Do_mismatch() {
	eng, _ := idem.New(memstore.New(), idem.Options{})
	ok := func(context.Context) (idem.Response, error) { return idem.Response{Status: 200}, nil }
	_, _ = eng.Do(context.Background(), "k", idem.Fingerprint([]byte("amount=10")), ok)
	_, err := eng.Do(context.Background(), "k", idem.Fingerprint([]byte("amount=99")), ok)
	fmt.Println(errors.Is(err, idem.ErrMismatch))
	// Output: true
}

// An effect that may have happened (a timeout after the request was sent) is held, not
// retried: a duplicate gets ErrInFlight until the lease runs out.
func ExampleUncertain() {
	eng, _ := idem.New(memstore.New(), idem.Options{})
	_, err := eng.Do(context.Background(), "k", idem.Fingerprint(nil), func(context.Context) (idem.Response, error) {
		return idem.Response{}, idem.Uncertain(errors.New("bank timed out after the request was sent"))
	})
	fmt.Println(errors.Is(err, idem.ErrUncertain))
	_, err = eng.Do(context.Background(), "k", idem.Fingerprint(nil), func(context.Context) (idem.Response, error) {
		panic("must not run")
	})
	fmt.Println(errors.Is(err, idem.ErrInFlight))
	// Output:
	// true
	// true
}

// Errors and panics release the claim, so a retry executes.
func ExampleDefaultPolicy() {
	fmt.Println(idem.DefaultPolicy(idem.Response{Status: 201}, nil))
	fmt.Println(idem.DefaultPolicy(idem.Response{Status: 503}, nil))
	fmt.Println(idem.StoreServerErrors(idem.Response{Status: 503}, nil))
	fmt.Println(idem.DefaultPolicy(idem.Response{}, idem.Uncertain(nil)))
	// Output:
	// keep
	// release
	// keep
	// uncertain
}

// A face builds a Call: the key and fingerprint decide what is a duplicate; the route and the
// request are kept with the record for operators (`idem list`, `idem inspect`, the console).
func ExampleEngine_Run() {
	st := memstore.New()
	eng, _ := idem.New(st, idem.Options{})
	body := []byte(`{"amount":1000}`)
	call := idem.Call{
		Key:         "order-1001",
		Fingerprint: idem.Fingerprint(body),
		Route:       "POST /v1/orders/{id}/pay",
		Request:     &idem.Request{Method: "POST", Target: "/v1/orders/1001/pay", Body: body, BodySize: int64(len(body))},
	}
	_, err := eng.Run(context.Background(), call, func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 201}, nil
	})
	if err != nil {
		panic(err)
	}
	rec, _ := st.Get(context.Background(), "order-1001")
	fmt.Println(rec.Route, rec.Request.Method, rec.Request.Target)
	// Output: POST /v1/orders/{id}/pay POST /v1/orders/1001/pay
}
