package chaos_test

import (
	"os"
	"time"

	"github.com/idemkit/idem/internal/chaos"
)

// Judging a small history: one operation executed once and replayed, one executed twice
// because the gateway that ran it first was killed before it stored the result (no client
// ever got that first answer, and the lease had time to run out before the second).
func ExampleJudge() {
	t := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	body := func(s string) []byte { return []byte(`{"effect":"` + s + `"}`) }
	h := chaos.History{
		Effects: []chaos.Effect{
			{Op: "op-1", ID: "e1", Gateway: "g0i1", At: t, Body: body("e1")},
			{Op: "op-2", ID: "e2", Gateway: "g1i1", At: t, Body: body("e2")},
			{Op: "op-2", ID: "e3", Gateway: "g0i1", At: t.Add(2500 * time.Millisecond), Body: body("e3")},
		},
		Answers: []chaos.Answer{
			{Op: "op-1", Status: 201, Body: body("e1")},
			{Op: "op-1", Status: 201, Body: body("e1"), Replayed: true},
			{Op: "op-2", Status: 201, Body: body("e3")},
			{Op: "op-1", Status: 201, Body: body("e1"), Replayed: true, Probe: true},
			{Op: "op-2", Status: 201, Body: body("e3"), Replayed: true, Probe: true},
		},
		Kills: []chaos.Kill{{Gateway: "g1i1", At: t.Add(2 * time.Millisecond)}},
	}
	chaos.Judge(h).Report(os.Stdout)
	// Output:
	// verdict: PASS
	//   effects executed more than once, unexplained  0 (must be 0)
	//   successes whose effect is missing             0 (must be 0)
	//   replays that differ from the original         0 (must be 0)
	//   other payload under a used key accepted       0 (must be 0)
	//   stuck keys after the leases expired           0 (must be 0)
	//   answers that belong to another tenant         0 (must be 0)
	// documented windows (each only for an execution never completed, or forced):
	//   re-executions after a gateway kill -9         1
	//   re-executions after a pause past the lease    0
	//   re-executions after a store outage            0
	//   re-executions after a lost upstream answer    0
	//   re-executions after a forced release          0
	// run:
	//   operations 2, executed 2, effects recorded 3
	//   deliveries 3: succeeded 3 (replayed 1), gave up 0 []
	//   mismatched deliveries 0, probes after the run 2, successes not retained (too large) 0
	//   live answers of executions the gateway could not store (lease lost, store down) 0
}
