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
		_, _ = st.Reserve(ctx, k, idem.Fingerprint(nil), now, time.Second, time.Minute)
	}
	n, err := sweeper.Sweep(ctx, st, now.Add(time.Hour), 2, 10, time.Second)
	fmt.Println(n, err, st.Len())
	// Output: 3 <nil> 0
}
