package gateway

import (
	"context"
	"log/slog"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// TestDefaultMemoryBudgetFollowsMaxBody: without memory_budget, the gateway's budget is
// DefaultMemoryBudget, or 4 × (2 × max_body) when that is larger, so that a max_body above
// 8 MiB still lets several requests at the limit run at once rather than one at a time; at a
// max_body so large that 8 × max_body would not fit an int64, no budget.
func TestDefaultMemoryBudgetFollowsMaxBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ maxBody, want int64 }{
		{1 << 20, idemhttp.DefaultMemoryBudget},
		{8 << 20, idemhttp.DefaultMemoryBudget},
		{32 << 20, 4 * 2 * 32 << 20},
		// Up to 2^58 the default is 8 × max_body; from there on it would overflow an int64
		// (or nearly): no budget, as memory_budget: -1.
		{1<<58 - 1, 8 * (1<<58 - 1)},
		{1 << 58, -1},
		{1 << 62, -1},
	} {
		g, err := New(context.Background(), Config{Upstream: "http://127.0.0.1:1", Scope: ScopeNone, MaxBody: ByteSize(tc.maxBody)},
			Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if got := g.budget.Limit(); got != tc.want {
			t.Errorf("max_body %d: default budget %d, want %d", tc.maxBody, got, tc.want)
		}
		g.Close()
	}
}
