package idem_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// A Go function made idempotent: the second call with the same order is answered from the
// store, decoded from JSON, and the card is charged once.
func ExampleWrap() {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		panic(err)
	}
	type Order struct {
		ID     string
		Amount int
	}
	type Receipt struct {
		Charge string
		Amount int
	}
	charge := idem.Wrap(eng, "charge", func(o Order) string { return o.ID },
		func(ctx context.Context, o Order) (Receipt, error) {
			fmt.Println("charging", o.Amount)
			return Receipt{Charge: "ch_" + o.ID, Amount: o.Amount}, nil
		})
	for range 2 {
		r, err := charge(context.Background(), Order{ID: "1001", Amount: 1000})
		fmt.Printf("%+v %v\n", r, err)
	}
	// Output:
	// charging 1000
	// {Charge:ch_1001 Amount:1000} <nil>
	// {Charge:ch_1001 Amount:1000} <nil>
}

// DoJSON gives the Result too, and fingerprints what the caller chooses: here the amount, not
// the request's timestamp.
func ExampleDoJSON() {
	eng, _ := idem.New(memstore.New(), idem.Options{})
	for _, sentAt := range []string{"10:00:00", "10:00:05"} {
		n, res, err := idem.DoJSON(context.Background(), eng, "job-2026-12-01", map[string]int{"amount": 1000},
			func(ctx context.Context) (int, error) {
				fmt.Println("running the job sent at", sentAt)
				return 42, nil
			})
		fmt.Println(n, res.Replayed, err)
	}
	// Output:
	// running the job sent at 10:00:00
	// 42 false <nil>
	// 42 true <nil>
}

// RunJSON takes a Call: its route is kept with the record for operators, and the fingerprint
// comes from the input.
func ExampleRunJSON() {
	st := memstore.New()
	eng, _ := idem.New(st, idem.Options{})
	call := idem.Call{Key: "invoice-7", Route: "billing.invoice"}
	n, _, err := idem.RunJSON(context.Background(), eng, call, map[string]int{"amount": 700},
		func(ctx context.Context) (int, error) { return 7, nil })
	rec, _ := st.Get(context.Background(), "invoice-7")
	fmt.Println(n, err, rec.Route)
	// Output: 7 <nil> billing.invoice
}
