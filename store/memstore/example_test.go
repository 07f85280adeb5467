package memstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// A memstore backs an engine in tests and single-process programs.
func Example() {
	st := memstore.New()
	res, _ := st.Reserve(context.Background(), idem.ReserveRequest{Key: "k", Fingerprint: idem.Fingerprint(nil), Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	fmt.Println(res.Claimed, res.Record.State)
	res, _ = st.Reserve(context.Background(), idem.ReserveRequest{Key: "k", Fingerprint: idem.Fingerprint(nil), Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
	fmt.Println(res.Claimed, res.Record.State)
	// Output:
	// true in_progress
	// false in_progress
}
