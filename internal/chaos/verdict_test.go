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

// good is a history that keeps every promise: a and b ran once, were answered and replayed.
func good() chaos.History {
	return chaos.History{
		Effects: []chaos.Effect{eff("a", "1", "g0i1", 0), eff("b", "2", "g1i1", 5)},
		Answers: []chaos.Answer{ok("a", "1", false), ok("a", "1", true), probe("a", "1"),
			ok("b", "2", false), {Op: "b", Status: 0, Err: "gave up"}, probe("b", "2"),
			{Op: "b", Status: 422, Mismatch: true}},
	}
}

// twice adds operation c, executed by g0i1 at 0 ms and, with nobody ever answered c/1, again
// by g2i1 at ms (the default lease is 2s), whose answer the clients got: a re-execution that
// only a fault of g0i1's can excuse.
func twice(h *chaos.History, ms int) {
	h.Effects = append(h.Effects, eff("c", "1", "g0i1", 0), eff("c", "2", "g2i1", ms))
	h.Answers = append(h.Answers, ok("c", "2", false), probe("c", "2"))
}

type judgeCase struct {
	name   string
	edit   func(h *chaos.History)
	field  func(v chaos.Verdict) int // the count this case must move to exactly 1
	wantOK bool
}

func unexplained(v chaos.Verdict) int { return v.UnexplainedDoubles }

func runJudgeCases(t *testing.T, cases []judgeCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := good()
			tc.edit(&h)
			v := chaos.Judge(h)
			if v.OK() != tc.wantOK {
				var b strings.Builder
				v.Report(&b)
				t.Fatalf("OK() = %v, want %v\n%s", v.OK(), tc.wantOK, b.String())
			}
			if tc.field != nil && tc.field(v) != 1 {
				t.Fatalf("the count for this case is %d, want 1: %+v", tc.field(v), v)
			}
		})
	}
}

// The verdict must tell every kind of bad history from a good one: each case breaks one
// promise and must be caught by exactly the count that names it.
func TestJudge(t *testing.T) {
	t.Parallel()
	runJudgeCases(t, []judgeCase{
		{"good", func(h *chaos.History) {}, nil, true},
		{"double effect", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("a", "3", "g2i1", 50))
		}, unexplained, false},
		{"double of a never-answered execution with no fault", func(h *chaos.History) { twice(h, 2500) }, unexplained, false},
		{"success never executed", func(h *chaos.History) {
			h.Answers = append(h.Answers, ok("a", "9", false))
		}, func(v chaos.Verdict) int { return v.SuccessWithoutEffect }, false},
		{"success with no effect at all", func(h *chaos.History) {
			h.Answers = append(h.Answers, ok("z", "1", false))
		}, func(v chaos.Verdict) int { return v.SuccessWithoutEffect }, false},
		{"replay differs", func(h *chaos.History) {
			// c/1 was excused by the kill, but a client was later answered with it: its
			// record had been completed, so this is a double as well.
			twice(h, 2500)
			h.Kills = []chaos.Kill{{Gateway: "g0i1", At: at(3)}}
			h.Answers = append(h.Answers, ok("c", "1", true))
		}, func(v chaos.Verdict) int { return v.DifferingReplays }, false},
		{"mismatch accepted", func(h *chaos.History) {
			h.Answers = append(h.Answers, chaos.Answer{Op: "a", Status: 201, Body: []byte("a/1"), Mismatch: true})
		}, func(v chaos.Verdict) int { return v.MismatchAccepted }, false},
		{"stuck key", func(h *chaos.History) {
			h.Answers = append(h.Answers, chaos.Answer{Op: "z", Status: 409, Probe: true})
		}, func(v chaos.Verdict) int { return v.StuckKeys }, false},
	})
}

// A kill -9 excuses a re-execution only if it hit the earlier execution's own process, after
// its request left and early enough for the lease to run out, and nobody was ever answered
// with the earlier execution.
func TestJudgeKillExcuse(t *testing.T) {
	t.Parallel()
	kill := func(gw string, ms int) []chaos.Kill { return []chaos.Kill{{Gateway: gw, At: at(ms)}} }
	crash := func(v chaos.Verdict) int { return v.CrashTakeovers }
	runJudgeCases(t, []judgeCase{
		{"holder killed after the effect", func(h *chaos.History) { twice(h, 2500); h.Kills = kill("g0i1", 3) }, crash, true},
		{"holder killed while its request was on its way", func(h *chaos.History) { twice(h, 2500); h.Kills = kill("g0i1", -40) }, crash, true},
		{"kill long before the effect", func(h *chaos.History) { twice(h, 2500); h.Kills = kill("g0i1", -5000) }, unexplained, false},
		{"kill after the re-execution", func(h *chaos.History) { twice(h, 2500); h.Kills = kill("g0i1", 2600) }, unexplained, false},
		{"kill too late for the lease to expire before the re-execution", func(h *chaos.History) {
			twice(h, 2500)
			h.Kills = kill("g0i1", 1600)
		}, unexplained, false},
		{"another gateway's kill", func(h *chaos.History) { twice(h, 2500); h.Kills = kill("g1i1", 3) }, unexplained, false},
		{"the killed holder's execution had been answered", func(h *chaos.History) {
			// A store that lets a second claim in while the first is completed: a kill nearby
			// must not excuse it.
			twice(h, 2500)
			h.Kills = kill("g0i1", 3)
			h.Answers = append(h.Answers, ok("c", "1", false))
		}, unexplained, false},
		{"the killed holder's execution was replayed later", func(h *chaos.History) {
			twice(h, 2500)
			h.Kills = kill("g0i1", 3)
			h.Answers = append(h.Answers, ok("c", "1", true))
		}, unexplained, false},
	})
}

// A pause excuses a re-execution only if it lasted the lease; if the paused holder's stale
// completion got through once it resumed (fencing broken), some client gets its answer, and
// the verdict fails.
func TestJudgePauseExcuse(t *testing.T) {
	t.Parallel()
	paused := func(from, to int) []chaos.Pause { return []chaos.Pause{{Gateway: "g0i1", From: at(from), To: at(to)}} }
	runJudgeCases(t, []judgeCase{
		{"holder paused past its lease", func(h *chaos.History) { twice(h, 2500); h.Pauses = paused(3, 2100) },
			func(v chaos.Verdict) int { return v.PauseTakeovers }, true},
		{"pause shorter than the lease", func(h *chaos.History) { twice(h, 2500); h.Pauses = paused(3, 1500) }, unexplained, false},
		{"pause that began after the re-execution", func(h *chaos.History) { twice(h, 2500); h.Pauses = paused(2600, 5000) }, unexplained, false},
		{"another gateway paused", func(h *chaos.History) {
			twice(h, 2500)
			h.Pauses = []chaos.Pause{{Gateway: "g1i1", From: at(3), To: at(3000)}}
		}, unexplained, false},
		{"the paused holder's completion was fenced, and its client still got its answer", func(h *chaos.History) {
			twice(h, 2500)
			h.Pauses = paused(3, 3000)
			h.Answers = append(h.Answers, ok("c", "1", false))
			h.Unstored = []chaos.Unstored{{Op: "c", Gateway: "g0i1", Err: "idem: lease lost"}}
		}, func(v chaos.Verdict) int { return v.PauseTakeovers }, true},
		{"an unstored answer replayed later was stored after all", func(h *chaos.History) {
			twice(h, 2500)
			h.Pauses = paused(3, 3000)
			h.Answers = append(h.Answers, ok("c", "1", false), ok("c", "1", true))
			h.Unstored = []chaos.Unstored{{Op: "c", Gateway: "g0i1", Err: "idem: lease lost"}}
		}, func(v chaos.Verdict) int { return v.DifferingReplays }, false},
		{"a holder paused before it sent the request, whose completion was fenced", func(h *chaos.History) {
			// g2i1 claimed c, was paused, and sent the request once resumed (c/2), after
			// g0i1 had taken over and completed c/1.
			h.Effects = append(h.Effects, eff("c", "1", "g0i1", 2500), eff("c", "2", "g2i1", 3050))
			h.Answers = append(h.Answers, ok("c", "1", false), probe("c", "1"))
			h.Pauses = []chaos.Pause{{Gateway: "g2i1", From: at(0), To: at(3000)}}
		}, func(v chaos.Verdict) int { return v.PauseTakeovers }, true},
		{"a holder paused before it sent the request, whose completion got through", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("c", "1", "g0i1", 2500), eff("c", "2", "g2i1", 3050))
			h.Answers = append(h.Answers, ok("c", "1", false), ok("c", "2", true))
			h.Pauses = []chaos.Pause{{Gateway: "g2i1", From: at(0), To: at(3000)}}
		}, unexplained, false},
		{"a holder paused before it sent the request, which went out just before the takeover's", func(h *chaos.History) {
			// g0i1 claimed c, was paused past its lease, and once resumed sent the request (c/1)
			// a moment before a retry it had queued meanwhile took the claim over (c/2).
			h.Effects = append(h.Effects, eff("c", "1", "g0i1", 3400), eff("c", "2", "g0i1", 3413))
			h.Answers = append(h.Answers, ok("c", "2", false), probe("c", "2"))
			h.Pauses = paused(0, 3390)
		}, func(v chaos.Verdict) int { return v.PauseTakeovers }, true},
		{"a pause long over before the request", func(h *chaos.History) {
			h.Effects = append(h.Effects, eff("c", "1", "g0i1", 3400), eff("c", "2", "g0i1", 3413))
			h.Answers = append(h.Answers, ok("c", "2", false), probe("c", "2"))
			h.Pauses = paused(-9000, -6000)
		}, unexplained, false},
		{"the paused holder's stale completion got through", func(h *chaos.History) {
			twice(h, 2500)
			h.Pauses = paused(3, 3000)
			h.Answers = append(h.Answers, ok("c", "1", false), ok("c", "1", true))
		}, unexplained, false},
	})
}

// A store outage excuses a re-execution only if it was long enough for an unrenewed lease to
// run out, and came between the earlier execution and the later.
func TestJudgeOutageExcuse(t *testing.T) {
	t.Parallel()
	down := func(from, to int) []chaos.Outage { return []chaos.Outage{{From: at(from), To: at(to)}} }
	runJudgeCases(t, []judgeCase{
		{"store down past half the lease", func(h *chaos.History) { twice(h, 2500); h.Outages = down(500, 1600) },
			func(v chaos.Verdict) int { return v.OutageTakeovers }, true},
		{"store down briefly", func(h *chaos.History) { twice(h, 2500); h.Outages = down(500, 800) }, unexplained, false},
		{"store down after the re-execution", func(h *chaos.History) { twice(h, 2500); h.Outages = down(2600, 5000) }, unexplained, false},
		{"store down long before", func(h *chaos.History) { twice(h, 2500); h.Outages = down(-9000, -4000) }, unexplained, false},
	})
}

// A lost upstream answer is an uncertain outcome: it excuses one re-execution, and only once
// the outcome was held for (most of) the lease.
func TestJudgeLostAnswerExcuse(t *testing.T) {
	t.Parallel()
	lost := func(op string, ms int) []chaos.LostAnswer {
		return []chaos.LostAnswer{{Op: op, Gateway: "g0i1", At: at(ms), Cause: "dropped"}}
	}
	runJudgeCases(t, []judgeCase{
		{"held for the lease, then taken over", func(h *chaos.History) { twice(h, 2500); h.LostAnswers = lost("c", 6) },
			func(v chaos.Verdict) int { return v.UncertainTakeovers }, true},
		{"released at once instead of held", func(h *chaos.History) { twice(h, 300); h.LostAnswers = lost("c", 6) }, unexplained, false},
		{"another op's lost answer", func(h *chaos.History) { twice(h, 2500); h.LostAnswers = lost("a", 6) }, unexplained, false},
		{"one lost answer explains one re-execution only", func(h *chaos.History) {
			twice(h, 2500)
			h.Effects = append(h.Effects, eff("c", "0", "g0i1", -5000))
			h.LostAnswers = lost("c", 6)
		}, unexplained, false},
	})
}

// Only a forced release that deleted a completed record, between the two executions, excuses
// executing it again; clients then rightly see both answers.
func TestJudgeReleaseExcuse(t *testing.T) {
	t.Parallel()
	rel := func(ms int, force, done bool) []chaos.Release {
		return []chaos.Release{{Op: "c", At: at(ms), Force: force, Done: done}}
	}
	completed := func(h *chaos.History) {
		twice(h, 2500)
		h.Answers = append(h.Answers, ok("c", "1", false), ok("c", "1", true))
	}
	runJudgeCases(t, []judgeCase{
		{"forced release of a completed key", func(h *chaos.History) { completed(h); h.Releases = rel(1000, true, true) },
			func(v chaos.Verdict) int { return v.OperatorReexecutions }, true},
		{"release without --force", func(h *chaos.History) { completed(h); h.Releases = rel(1000, false, true) }, unexplained, false},
		{"forced release that failed", func(h *chaos.History) { completed(h); h.Releases = rel(1000, true, false) }, unexplained, false},
		{"forced release whose outcome is unknown", func(h *chaos.History) {
			completed(h)
			h.Releases = []chaos.Release{{Op: "c", At: at(1000), Force: true, Unknown: true}}
		}, func(v chaos.Verdict) int { return v.OperatorReexecutions }, true},
		{"release without --force whose outcome is unknown", func(h *chaos.History) {
			completed(h)
			h.Releases = []chaos.Release{{Op: "c", At: at(1000), Unknown: true}}
		}, unexplained, false},
		{"forced release after the re-execution", func(h *chaos.History) { completed(h); h.Releases = rel(2600, true, true) }, unexplained, false},
		{"a release without --force of a live key", func(h *chaos.History) {
			// The key was in progress and its holder alive: a release must be refused, so
			// nothing excuses the re-execution it let in.
			twice(h, 300)
			h.Releases = rel(100, false, true)
		}, unexplained, false},
	})
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

// An answer too large to keep is replayed as a "not retained" problem with the original
// status: a success that matches no execution's body, and must not count as one that did not
// happen.
func TestJudgeNotRetained(t *testing.T) {
	t.Parallel()
	h := good()
	h.Effects = append(h.Effects, eff("c", "1", "g0i1", 0))
	h.Answers = append(h.Answers, ok("c", "1", false),
		chaos.Answer{Op: "c", Status: 201, Body: []byte(`{"type":"…/response-not-retained"}`), Replayed: true, NotRetained: true},
		chaos.Answer{Op: "c", Status: 201, Body: []byte(`{"type":"…/response-not-retained"}`), Replayed: true, NotRetained: true, Probe: true})
	v := chaos.Judge(h)
	if !v.OK() || v.NotRetained != 2 || v.Probes != 3 {
		t.Fatalf("%+v", v)
	}
	h.Answers[len(h.Answers)-1].NotRetained = false
	if v := chaos.Judge(h); v.SuccessWithoutEffect != 1 {
		t.Fatalf("a success that is not marked as not retained and matches no execution passed: %+v", v)
	}
}

// A stall of the machine near two executions excuses nothing (the harness did not cause it),
// but the example names it, so a reader sees the likely cause.
func TestJudgeStallShownNotExcused(t *testing.T) {
	t.Parallel()
	var h chaos.History
	twice(&h, 1500)
	h.Lease = 2 * time.Second
	h.Stalls = []chaos.Stall{{At: at(1200), Late: 1100 * time.Millisecond}, {At: at(90_000), Late: time.Second}}
	v := chaos.Judge(h)
	if v.UnexplainedDoubles != 1 || len(v.Examples) != 1 {
		t.Fatalf("unexplained %d, examples %q: want the double unexplained", v.UnexplainedDoubles, v.Examples)
	}
	if ex := v.Examples[0]; !strings.Contains(ex, "machine stalled 1100ms until +1200ms") || strings.Contains(ex, "+90000ms") {
		t.Errorf("example %q: want the stall near the executions, and only it", ex)
	}
}

// A holder killed during a store outage, or before it could renew after one, could not renew
// its lease since the outage began: a takeover a lease after that is the documented window,
// even when the kill itself came less than half a lease before it. Killed well after the store
// was back (it could have renewed), the same takeover is not excused.
func TestJudgeKillAfterOutage(t *testing.T) {
	t.Parallel()
	crashed := func(v chaos.Verdict) int { return v.CrashTakeovers }
	outage := func(h *chaos.History, from, to, kill, next int) {
		twice(h, next)
		h.Outages = []chaos.Outage{{From: at(from), To: at(to)}}
		h.Kills = []chaos.Kill{{Gateway: "g0i1", At: at(kill)}}
	}
	runJudgeCases(t, []judgeCase{
		// With a 2s lease a kill excuses a takeover at 2300ms when it came by 1300ms.
		{"killed during the outage", func(h *chaos.History) { outage(h, 0, 1500, 1400, 2300) }, crashed, true},
		{"killed just after it, before a renewal could land", func(h *chaos.History) { outage(h, 0, 1200, 1400, 2300) }, crashed, true},
		{"killed well after the store was back", func(h *chaos.History) { outage(h, 0, 950, 1400, 2300) }, unexplained, false},
		{"killed before the outage began", func(h *chaos.History) { outage(h, 1450, 1900, 1400, 2300) }, unexplained, false},
	})
}

// A gateway cut off from the store past half a lease excuses its own execution's takeover,
// not another gateway's.
func TestJudgeGatewayCutOffExcuse(t *testing.T) {
	t.Parallel()
	cut := func(gw string) func(h *chaos.History) {
		return func(h *chaos.History) {
			twice(h, 2500)
			h.Outages = []chaos.Outage{{From: at(100), To: at(1600), Gateway: gw}}
		}
	}
	runJudgeCases(t, []judgeCase{
		{"holder cut off", cut("g0i1"), func(v chaos.Verdict) int { return v.OutageTakeovers }, true},
		{"another gateway cut off", cut("g1i1"), unexplained, false},
	})
}

// A re-execution after the holder was stopped by a deploy (SIGTERM, drain, exit) is never
// excused, and is counted apart.
func TestJudgeDrainNotExcused(t *testing.T) {
	t.Parallel()
	runJudgeCases(t, []judgeCase{
		{"drained holder", func(h *chaos.History) {
			twice(h, 2500)
			h.Deploys = []chaos.Deploy{{Gateway: "g0i1", At: at(100), Exited: at(1100)}}
		}, func(v chaos.Verdict) int { return v.DrainedDoubles }, false},
		{"drained holder, taken over after the call's deadline and the lease", func(h *chaos.History) {
			twice(h, 6100)
			h.Deploys = []chaos.Deploy{{Gateway: "g0i1", At: at(100), Exited: at(1100)}}
		}, func(v chaos.Verdict) int { return v.DrainCutTakeovers }, true},
		{"drained holder, also killed", func(h *chaos.History) {
			twice(h, 2500)
			h.Deploys = []chaos.Deploy{{Gateway: "g0i1", At: at(100), Exited: at(1100)}}
			h.Kills = []chaos.Kill{{Gateway: "g0i1", At: at(200)}}
		}, func(v chaos.Verdict) int { return v.CrashTakeovers }, true},
	})
}

// An answer that is another tenant's execution, under the same key, is counted as such.
func TestJudgeCrossTenant(t *testing.T) {
	t.Parallel()
	runJudgeCases(t, []judgeCase{
		{"own tenant", func(h *chaos.History) {
			e := eff("t1/d", "9", "g0i1", 10)
			e.Tenant = "t1"
			h.Effects = append(h.Effects, e)
			a := ok("t1/d", "9", true)
			a.Tenant = "t1"
			h.Answers = append(h.Answers, a)
		}, nil, true},
		{"another tenant's answer", func(h *chaos.History) {
			e := eff("t1/d", "9", "g0i1", 10)
			e.Tenant = "t1"
			h.Effects = append(h.Effects, e)
			a := chaos.Answer{Op: "t2/d", Tenant: "t2", Status: 201, Body: e.Body, Replayed: true}
			h.Answers = append(h.Answers, ok("t1/d", "9", false), a)
		}, func(v chaos.Verdict) int { return v.CrossTenant }, false},
	})
}

// A delivery with another payload may run only on a key the judgement found free: executed as
// a re-execution that a fault of the earlier holder excuses, it is a documented window (and the
// probe's 422 after it is right); executed otherwise, it is accepted wrongly, and a double.
func TestJudgeMismatchOnFreedKey(t *testing.T) {
	t.Parallel()
	mismatchRun := func(h *chaos.History) {
		// c/1 by g0i1 (never answered), then the other payload's execution c/2 by g2i1.
		h.Effects = append(h.Effects, eff("c", "1", "g0i1", 0), eff("c", "2", "g2i1", 2500))
		h.Answers = append(h.Answers, chaos.Answer{Op: "c", Status: 201, Body: []byte("c/2"), Mismatch: true},
			chaos.Answer{Op: "c", Status: 422, Probe: true})
	}
	runJudgeCases(t, []judgeCase{
		{"on a key freed by the holder's kill", func(h *chaos.History) {
			mismatchRun(h)
			h.Kills = []chaos.Kill{{Gateway: "g0i1", At: at(3)}}
		}, func(v chaos.Verdict) int { return v.MismatchTakeovers }, true},
		{"with no fault to free the key", mismatchRun, func(v chaos.Verdict) int { return v.MismatchAccepted }, false},
		{"its probe is not stuck only when the key was freed", mismatchRun, func(v chaos.Verdict) int { return v.StuckKeys }, false},
	})
}

// A holder that reports it stalled past its lease (its heartbeat ran late, after the lease
// had ended) explains a takeover as a pause does; a stall reported by another gateway, on
// another operation, one that ended before the holder's request left, or one shorter than the
// lapse it reports (a heartbeat scheduled too late: a bug, not a stall) does not.
func TestJudgeHolderStall(t *testing.T) {
	t.Parallel()
	stallTakeovers := func(v chaos.Verdict) int { return v.StallTakeovers }
	stall := func(op, gw string, atMs int, stalled, lapsed time.Duration) func(h *chaos.History) {
		return func(h *chaos.History) {
			twice(h, 2500)
			h.HolderStalls = []chaos.HolderStall{{Op: op, Gateway: gw, At: at(atMs), Stalled: stalled, Lapsed: lapsed}}
		}
	}
	runJudgeCases(t, []judgeCase{
		{"holder stalled past its lease", stall("c", "g0i1", 2600, 2300*time.Millisecond, 300*time.Millisecond), stallTakeovers, true},
		{"another gateway stalled", stall("c", "g1i1", 2600, 2300*time.Millisecond, 300*time.Millisecond), unexplained, false},
		{"a stall on another operation", stall("a", "g0i1", 2600, 2300*time.Millisecond, 300*time.Millisecond), unexplained, false},
		{"a stall over before the request left", stall("c", "g0i1", -2500, 2300*time.Millisecond, 300*time.Millisecond), unexplained, false},
		{"a stall that began after the takeover", stall("c", "g0i1", 4000, 1000*time.Millisecond, 300*time.Millisecond), unexplained, false},
		{"a heartbeat scheduled too late", stall("c", "g0i1", 2600, 100*time.Millisecond, 300*time.Millisecond), unexplained, false},
	})
	// The stalled holder's own request, sent as it woke after the key was taken over, and
	// never completed (its completion refused): excused like a late request after a pause.
	var h chaos.History
	h.Effects = []chaos.Effect{eff("c", "1", "g2i1", 0), eff("c", "2", "g0i1", 2500)}
	h.Answers = []chaos.Answer{ok("c", "1", false), probe("c", "1")}
	h.HolderStalls = []chaos.HolderStall{{Op: "c", Gateway: "g0i1", At: at(2550), Stalled: 2400 * time.Millisecond, Lapsed: 200 * time.Millisecond}}
	if v := chaos.Judge(h); v.StallTakeovers != 1 || !v.OK() {
		t.Errorf("late request of a stalled holder: %+v", v)
	}
	h.Answers = append(h.Answers, ok("c", "2", true)) // but it was completed: a real double
	if v := chaos.Judge(h); v.OK() {
		t.Errorf("a completed execution of a stalled holder passed: %+v", v)
	}
}
