package consumerchaos_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/consumerchaos"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// base is a clean engine-mode history: facts a and b, each executed and completed once.
func base() consumerchaos.History {
	return consumerchaos.History{
		Mode: consumerchaos.Engine, Facts: []string{"a", "b"}, Messages: 3, Lease: 2 * time.Second,
		Effects: []consumerchaos.Effect{{Fact: "a", Worker: "w0", At: at(0)}, {Fact: "b", Worker: "w1", At: at(10)}},
		Deliveries: []consumerchaos.Delivery{
			{Fact: "a", Worker: "w0", At: at(5), Outcome: "executed"},
			{Fact: "b", Worker: "w1", At: at(15), Outcome: "executed"},
			{Fact: "b", Worker: "w0", At: at(20), Outcome: "replay"},
		},
	}
}

func TestJudgeCleanRunPasses(t *testing.T) {
	for _, mode := range []consumerchaos.Mode{consumerchaos.Engine, consumerchaos.Tx} {
		h := base()
		h.Mode = mode
		v := consumerchaos.Judge(h)
		if !v.OK() || v.Effects != 2 || v.Facts != 2 || v.Outcomes["replay"] != 1 {
			t.Fatalf("%s: %+v", mode, v)
		}
		var buf bytes.Buffer
		v.Report(&buf)
		if !strings.Contains(buf.String(), "PASS") {
			t.Fatalf("report: %s", buf.String())
		}
	}
}

func TestJudgeCountsViolations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*consumerchaos.History)
		check func(consumerchaos.Verdict) bool
	}{
		{"a completed fact executed again", func(h *consumerchaos.History) {
			h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(3000)})
		}, func(v consumerchaos.Verdict) bool { return v.UnexplainedDoubles == 1 && v.DoubledFacts[0] == "a" }},
		{"a completed fact executed again after its worker was killed", func(h *consumerchaos.History) {
			h.Kills = append(h.Kills, consumerchaos.Kill{Worker: "w0", At: at(100), Where: "before-ack"})
			h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(3000)})
		}, func(v consumerchaos.Verdict) bool { return v.UnexplainedDoubles == 1 && v.CrashTakeovers == 0 }},
		{"an uncompleted execution's worker killed too late to explain the next", func(h *consumerchaos.History) {
			h.Deliveries = h.Deliveries[1:]
			h.Kills = append(h.Kills, consumerchaos.Kill{Worker: "w0", At: at(2500), Where: "random"})
			h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(3000)})
		}, func(v consumerchaos.Verdict) bool { return v.UnexplainedDoubles == 1 }},
		{"a pause shorter than the lease", func(h *consumerchaos.History) {
			h.Deliveries = h.Deliveries[1:]
			h.Pauses = append(h.Pauses, consumerchaos.Pause{Worker: "w0", From: at(1), To: at(1500)})
			h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(3000)})
		}, func(v consumerchaos.Verdict) bool { return v.UnexplainedDoubles == 1 && v.PauseTakeovers == 0 }},
		{"a worker resumed from a pause completes a claim it no longer held", func(h *consumerchaos.History) {
			h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(3000)})
			h.Deliveries = append(h.Deliveries, consumerchaos.Delivery{Fact: "a", Worker: "w1", At: at(3005), Outcome: "executed"})
			h.Pauses = append(h.Pauses, consumerchaos.Pause{Worker: "w1", From: at(-2000), To: at(2990)})
		}, func(v consumerchaos.Verdict) bool { return v.UnexplainedDoubles == 1 && v.PauseTakeovers == 0 }},
		{"transaction mode excuses nothing", func(h *consumerchaos.History) {
			h.Mode = consumerchaos.Tx
			h.Deliveries = h.Deliveries[1:]
			h.Kills = append(h.Kills, consumerchaos.Kill{Worker: "w0", At: at(1), Where: "mid-effect"})
			h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(3000)})
		}, func(v consumerchaos.Verdict) bool { return v.UnexplainedDoubles == 1 && v.CrashTakeovers == 0 }},
		{"a fact never executed", func(h *consumerchaos.History) {
			h.Facts = append(h.Facts, "c")
		}, func(v consumerchaos.Verdict) bool { return v.Lost == 1 }},
		{"an effect of no published fact", func(h *consumerchaos.History) {
			h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "z", Worker: "w1", At: at(3000)})
		}, func(v consumerchaos.Verdict) bool { return v.Phantoms == 1 }},
		{"a dead-lettered delivery", func(h *consumerchaos.History) {
			h.Deliveries = append(h.Deliveries, consumerchaos.Delivery{Fact: "a", Worker: "w1", At: at(50), Outcome: "rejected"})
		}, func(v consumerchaos.Verdict) bool { return v.Rejected == 1 }},
		{"messages left on the broker", func(h *consumerchaos.History) {
			h.Undrained = 2
		}, func(v consumerchaos.Verdict) bool { return v.Undrained == 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := base()
			tc.edit(&h)
			v := consumerchaos.Judge(h)
			if v.OK() || !tc.check(v) {
				t.Fatalf("verdict %+v", v)
			}
			var buf bytes.Buffer
			v.Report(&buf)
			if !strings.Contains(buf.String(), "FAIL") || len(v.Examples) == 0 {
				t.Fatalf("report without a failure or an example:\n%s", buf.String())
			}
		})
	}
}

func TestJudgeExcusesDocumentedWindows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*consumerchaos.History)
		check func(consumerchaos.Verdict) bool
	}{
		{"worker killed mid-effect", func(h *consumerchaos.History) {
			h.Deliveries = h.Deliveries[1:] // a's execution never completed
			h.Kills = append(h.Kills, consumerchaos.Kill{Worker: "w0", At: at(2), Where: "mid-effect"})
			h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(2500)})
		}, func(v consumerchaos.Verdict) bool { return v.CrashTakeovers == 1 }},
		{"worker stopped past its lease", func(h *consumerchaos.History) {
			h.Deliveries = h.Deliveries[1:]
			h.Pauses = append(h.Pauses, consumerchaos.Pause{Worker: "w0", From: at(1), To: at(2600)})
			h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(2300)})
		}, func(v consumerchaos.Verdict) bool { return v.PauseTakeovers == 1 }},
		{"worker resumed after its claim was taken over", func(h *consumerchaos.History) {
			// w1 took a over and completed it; w0, stopped mid-handler, writes its effect late.
			h.Effects = []consumerchaos.Effect{{Fact: "a", Worker: "w1", At: at(0)}, {Fact: "b", Worker: "w1", At: at(10)}, {Fact: "a", Worker: "w0", At: at(3000)}}
			h.Deliveries[0].Worker = "w1"
			h.Pauses = append(h.Pauses, consumerchaos.Pause{Worker: "w0", From: at(-2000), To: at(2990)})
		}, func(v consumerchaos.Verdict) bool { return v.PauseTakeovers == 1 }},
		{"completion not stored", func(h *consumerchaos.History) {
			h.Deliveries[0].Unstored = true
			h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(2500)})
		}, func(v consumerchaos.Verdict) bool { return v.UnstoredTakeovers == 1 && v.UnstoredLogged == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := base()
			tc.edit(&h)
			v := consumerchaos.Judge(h)
			if !v.OK() || !tc.check(v) {
				t.Fatalf("verdict %+v", v)
			}
			h.Mode = consumerchaos.Tx // the same history in transaction mode is a double
			if v := consumerchaos.Judge(h); v.UnexplainedDoubles != 1 {
				t.Fatalf("transaction mode: verdict %+v", v)
			}
		})
	}
}

// A holder killed just under half a lease before the takeover is excused only when a store
// cut shortly before the kill may have made its last renewal fail.
func TestJudgeKillAfterStoreCut(t *testing.T) {
	h := base()
	h.Deliveries = h.Deliveries[1:]
	h.Kills = append(h.Kills, consumerchaos.Kill{Worker: "w0", At: at(1100), Where: "random"})
	h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(2090)})
	if v := consumerchaos.Judge(h); v.UnexplainedDoubles != 1 {
		t.Fatalf("without a cut: %+v", v)
	}
	h.Cuts = append(h.Cuts, consumerchaos.Cut{At: at(500), What: "broker"})
	if v := consumerchaos.Judge(h); v.UnexplainedDoubles != 1 {
		t.Fatalf("with a broker cut: %+v", v)
	}
	h.Cuts = append(h.Cuts, consumerchaos.Cut{At: at(500), What: "store"})
	if v := consumerchaos.Judge(h); !v.OK() || v.CrashTakeovers != 1 {
		t.Fatalf("with a store cut: %+v", v)
	}
}

// A run of store cuts, each within half a lease of the next, may have failed every renewal
// since the first.
func TestJudgeKillAfterStoreCuts(t *testing.T) {
	h := base()
	h.Deliveries = h.Deliveries[1:]
	h.Kills = append(h.Kills, consumerchaos.Kill{Worker: "w0", At: at(1660), Where: "random"})
	h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w1", At: at(1880)})
	h.Cuts = append(h.Cuts, consumerchaos.Cut{At: at(950), What: "store"})
	if v := consumerchaos.Judge(h); v.UnexplainedDoubles != 1 {
		t.Fatalf("one cut: %+v", v)
	}
	// In the order the harness records them.
	h.Cuts = []consumerchaos.Cut{{At: at(160), What: "store"}, {At: at(950), What: "store"}}
	if v := consumerchaos.Judge(h); !v.OK() || v.CrashTakeovers != 1 {
		t.Fatalf("a run of cuts: %+v", v)
	}
}

// A worker that runs a fact twice (stopped past its lease, its completion refused, then handed
// the fact again) is judged on what it logged for each execution: the second one's completion
// does not make the first completed.
func TestJudgeSameWorkerTwice(t *testing.T) {
	h := base()
	h.Deliveries = []consumerchaos.Delivery{
		{Fact: "a", Worker: "w0", At: at(4650), Outcome: "executed", Unstored: true},
		{Fact: "a", Worker: "w0", At: at(5090), Outcome: "executed", Takeover: true},
		{Fact: "b", Worker: "w1", At: at(15), Outcome: "executed"},
	}
	h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w0", At: at(5010)})
	h.Pauses = append(h.Pauses, consumerchaos.Pause{Worker: "w0", From: at(170), To: at(3035)})
	if v := consumerchaos.Judge(h); !v.OK() || v.PauseTakeovers != 1 {
		t.Fatalf("%+v", v)
	}
	// Had the first completion been stored, the second execution has no excuse.
	h.Deliveries[0].Unstored = false
	if v := consumerchaos.Judge(h); v.UnexplainedDoubles != 1 {
		t.Fatalf("first completed: %+v", v)
	}
}

// A worker cut off from the store past its lease writes its effect after another worker took
// the fact over and completed it; its own completion is refused. Excused only with a store cut
// before it, and only when its completion was refused.
func TestJudgeLateEffectOfAPartitionedHolder(t *testing.T) {
	h := base()
	h.Effects = append(h.Effects, consumerchaos.Effect{Fact: "a", Worker: "w2", At: at(130)})
	h.Deliveries = append(h.Deliveries, consumerchaos.Delivery{Fact: "a", Worker: "w2", At: at(330), Outcome: "executed", Unstored: true})
	h.Cuts = []consumerchaos.Cut{{At: at(-4500), What: "store"}, {At: at(-2000), What: "broker"}, {At: at(3000), What: "store"}}
	if v := consumerchaos.Judge(h); v.UnexplainedDoubles != 1 {
		t.Fatalf("no store cut in the two leases before: %+v", v)
	}
	h.Cuts = append(h.Cuts, consumerchaos.Cut{At: at(-2000), What: "store"})
	if v := consumerchaos.Judge(h); !v.OK() || v.UnstoredTakeovers != 1 {
		t.Fatalf("after a store cut: %+v", v)
	}
	h.Deliveries[len(h.Deliveries)-1].Unstored = false
	if v := consumerchaos.Judge(h); v.UnexplainedDoubles != 1 {
		t.Fatalf("completion stored: %+v", v)
	}
}
