package sweeper_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/sweeper"
)

// Sweep deletes expired records in bounded batches; a Sweeper does it on an interval.
func ExampleSweep() {
	st := memstore.New()
	ctx := context.Background()
	now := time.Now()
	for _, k := range []string{"a", "b", "c"} {
		_, _ = st.Reserve(ctx, idem.ReserveRequest{Key: k, Fingerprint: idem.Fingerprint(nil), Now: now, Lease: time.Second, TTL: time.Minute})
	}
	n, err := sweeper.Sweep(ctx, st, now.Add(time.Hour), 2, 10, time.Second)
	fmt.Println(n, err, st.Len())
	// Output: 3 <nil> 0
}

// Drain works off a backlog in one paced pass: here it spends at most half of its time in the
// store, and reports what it did.
func ExampleDrain() {
	st := memstore.New()
	ctx := context.Background()
	now := time.Now()
	for i := range 2500 {
		_, _ = st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprint("k", i), Fingerprint: idem.Fingerprint(nil), Now: now, Lease: time.Second, TTL: time.Minute})
	}
	r, err := sweeper.Drain(ctx, st, sweeper.Options{
		Batch: 1000, MaxShare: 0.5, Now: func() time.Time { return now.Add(time.Hour) },
	})
	fmt.Println(r.Deleted, r.Batches, r.CaughtUp, err)
	// Output: 2500 3 true <nil>
}
