package chaos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/chaos"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func eff(op, id, gw string, ms int) chaos.Effect {
	return chaos.Effect{Op: op, ID: id, Gateway: gw, At: at(ms), Body: []byte(op + "/" + id)}
}

func ok(op, id string, replayed bool) chaos.Answer {
	return chaos.Answer{Op: op, Status: 201, Body: []byte(op + "/" + id), Replayed: replayed}
}

func probe(op, id string) chaos.Answer {
	a := ok(op, id, true)
	a.Probe = true
	return a
}

// The verdict must tell every kind of bad history from a good one: each case breaks one
// promise and must be caught by exactly the count that names it.
func TestJudge(t *testing.T) {
	t.Parallel()
	good := chaos.History{
		Effects: []chaos.Effect{eff("a", "1", "g0i1", 0), eff("b", "2", "g1i1", 5)},
		Answers: []chaos.Answer{ok("a", "1", false), ok("a", "1", true), probe("a", "1"),
			ok("b", "2", false), {Op: "b", Status: 0, Err: "gave up"}, probe("b", "2"),
			{Op: "b", Status: 422, Mismatch: true}},
	}
	for _, tc := range []struct {
		name   string
		edit   func(h *chaos.History)
		field  func(v chaos.Verdict) int
		wantOK bool
	}{
		{"good", func(h *chaos.History) {}, func(v chaos.Verdict) int { return 0 }, true},
		{"double effect", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("a", "3", "g2i1", 50))
		}, func(v chaos.Verdict) int { return v.UnexplainedDoubles }, false},
		{"double after a kill too long before", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("a", "3", "g2i1", 50))
			h.Kills = []chaos.Kill{{Gateway: "g0i1", At: at(-5000)}}
		}, func(v chaos.Verdict) int { return v.UnexplainedDoubles }, false},
		{"double after another gateway's kill", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("a", "3", "g2i1", 50))
			h.Kills = []chaos.Kill{{Gateway: "g1i1", At: at(10)}}
		}, func(v chaos.Verdict) int { return v.UnexplainedDoubles }, false},
		{"double after another op's lost answer", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("a", "3", "g2i1", 50))
			h.LostAnswers = []chaos.LostAnswer{{Op: "b", Gateway: "g0i1", At: at(1)}}
		}, func(v chaos.Verdict) int { return v.UnexplainedDoubles }, false},
		{"success never executed", func(h *chaos.History) {
			h.Answers = append(h.Answers, ok("a", "9", false))
		}, func(v chaos.Verdict) int { return v.SuccessWithoutEffect }, false},
		{"success with no effect at all", func(h *chaos.History) {
			h.Answers = append(h.Answers, ok("c", "1", false))
		}, func(v chaos.Verdict) int { return v.SuccessWithoutEffect }, false},
		{"replay differs", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("a", "3", "g2i1", 50))
			h.LostAnswers = []chaos.LostAnswer{{Op: "a", Gateway: "g0i1", At: at(1)}}
			h.Answers = append(h.Answers, ok("a", "3", true))
		}, func(v chaos.Verdict) int { return v.DifferingReplays }, false},
		{"mismatch accepted", func(h *chaos.History) {
			h.Answers = append(h.Answers, chaos.Answer{Op: "a", Status: 201, Body: []byte("a/1"), Mismatch: true})
		}, func(v chaos.Verdict) int { return v.MismatchAccepted }, false},
		{"stuck key", func(h *chaos.History) {
			h.Answers = append(h.Answers, chaos.Answer{Op: "c", Status: 409, Probe: true})
		}, func(v chaos.Verdict) int { return v.StuckKeys }, false},
		{"re-execution after a kill is the documented window", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("a", "3", "g2i1", 2500))
			h.Kills = []chaos.Kill{{Gateway: "g0i1", At: at(3)}}
		}, func(v chaos.Verdict) int { return v.CrashTakeovers }, true},
		{"kill while the request was on its way", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("a", "3", "g2i1", 2500))
			h.Kills = []chaos.Kill{{Gateway: "g0i1", At: at(-40)}}
		}, func(v chaos.Verdict) int { return v.CrashTakeovers }, true},
		{"re-execution after a lost answer is the documented window", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("b", "3", "g2i1", 2500))
			h.LostAnswers = []chaos.LostAnswer{{Op: "b", Gateway: "g1i1", At: at(6)}}
		}, func(v chaos.Verdict) int { return v.UncertainTakeovers }, true},
		{"one lost answer explains one re-execution only", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("b", "3", "g1i1", 2500), eff("b", "4", "g1i1", 5000))
			h.LostAnswers = []chaos.LostAnswer{{Op: "b", Gateway: "g1i1", At: at(6)}}
		}, func(v chaos.Verdict) int { return v.UnexplainedDoubles }, false},
		{"superseded answer after a crash", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("a", "3", "g2i1", 2500))
			h.Kills = []chaos.Kill{{Gateway: "g0i1", At: at(3)}}
			h.Answers = append(h.Answers, ok("a", "3", true))
		}, func(v chaos.Verdict) int { return v.SupersededAnswers }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := good
			h.Effects = append([]chaos.Effect(nil), good.Effects...)
			h.Answers = append([]chaos.Answer(nil), good.Answers...)
			tc.edit(&h)
			v := chaos.Judge(h)
			if v.OK() != tc.wantOK {
				var b strings.Builder
				v.Report(&b)
				t.Fatalf("OK() = %v, want %v\n%s", v.OK(), tc.wantOK, b.String())
			}
			if tc.name != "good" && tc.field(v) != 1 {
				t.Fatalf("the count for this case is %d, want 1: %+v", tc.field(v), v)
			}
		})
	}
}

func TestJudgeCounts(t *testing.T) {
	t.Parallel()
	v := chaos.Judge(chaos.History{
		Effects: []chaos.Effect{eff("a", "1", "g0i1", 0)},
		Answers: []chaos.Answer{ok("a", "1", false), ok("a", "1", true), {Op: "a", Status: 503}, {Op: "a"}, probe("a", "1")},
	})
	if v.Ops != 1 || v.Executed != 1 || v.Effects != 1 || v.Deliveries != 4 || v.Succeeded != 2 || v.Replayed != 1 ||
		v.GaveUp[503] != 1 || v.GaveUp[0] != 1 || v.Probes != 1 || !v.OK() {
		t.Fatalf("%+v", v)
	}
}
