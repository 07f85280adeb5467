package idemlambda_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/store/memstore"
)

// TestLeaseMarginSetsTheClaimsEnd: the claim made in an invocation ends at its deadline plus
// Options.LeaseMargin, 500 ms (DefaultLeaseMargin, as documented) when the margin is not set.
func TestLeaseMarginSetsTheClaimsEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		margin, want time.Duration
	}{{0, 500 * time.Millisecond}, {3 * time.Second, 3 * time.Second}} {
		st := memstore.New()
		t.Cleanup(func() { st.Close() })
		eng, err := idem.New(st, idem.Options{Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var lease time.Time
		h, err := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "id", Name: "margin", LeaseMargin: tc.margin},
			func(ctx context.Context, _ map[string]any) (string, error) {
				rec, err := st.Get(ctx, idem.ScopedKey("margin", "evt-1"))
				lease = rec.LeaseUntil
				return "ok", err
			})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		_, err = h(ctx, map[string]any{"id": "evt-1"})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if d := lease.Sub(deadline.Add(tc.want)); d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("LeaseMargin %s: the claim ends %s after the deadline, want %s", tc.margin, lease.Sub(deadline), tc.want)
		}
	}
}
