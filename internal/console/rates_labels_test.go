package console

import (
	"fmt"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// TestRateGroupsUseOutcomeLabels: the console reads the gateway's idem_requests_total by its
// outcome label values, which are idemhttp's Outcome values: a group that names a word the
// middleware does not say would stay at 0 for ever.
func TestRateGroupsUseOutcomeLabels(t *testing.T) {
	want := map[string][]idemhttp.Outcome{
		"new":    {idemhttp.OutcomeExecuted, idemhttp.OutcomeReleased, idemhttp.OutcomeUncertain, idemhttp.OutcomeOversize, "upstream_error"},
		"replay": {idemhttp.OutcomeReplay},
		"409":    {idemhttp.OutcomeInFlight},
		"422":    {idemhttp.OutcomeMismatch},
		"503":    {idemhttp.OutcomeStoreError, idemhttp.OutcomeOverloaded},
	}
	if len(rateGroups) != len(want) {
		t.Fatalf("%d rate groups, want %d", len(rateGroups), len(want))
	}
	for _, g := range rateGroups {
		if got, w := fmt.Sprint(g.Outcomes), fmt.Sprint(want[g.Name]); got != w {
			t.Errorf("rate group %s counts %s, want %s", g.Name, got, w)
		}
	}
}
