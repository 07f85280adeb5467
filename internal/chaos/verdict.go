package chaos

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// Effect is one execution of an operation's effect, as the upstream recorded it before it
// answered: one row per execution, never merged.
type Effect struct {
	// Op is the operation (the idempotency key's intent).
	Op string
	// ID identifies this execution; the upstream puts it in its answer.
	ID string
	// Gateway names the gateway process (slot and incarnation) that forwarded the request.
	Gateway string
	// Tenant names the caller the execution was for ("" with a single caller), as the
	// upstream saw it.
	Tenant string
	// At is when the upstream recorded the effect.
	At time.Time
	// Body is the exact answer body the upstream sent for this execution.
	Body []byte
}

// Answer is what a client finally got for one delivery of an operation (after its retries).
type Answer struct {
	// Op is the operation.
	Op string
	// Tenant names the caller that sent the delivery ("" with a single caller). A success
	// whose body is an execution for another tenant is counted in Verdict.CrossTenant.
	Tenant string
	// Status is the final HTTP status, 0 if the client gave up on a network error.
	Status int
	// Body is the final answer's body.
	Body []byte
	// Replayed reports Idempotent-Replayed: true.
	Replayed bool
	// Mismatch marks a delivery sent with the operation's key but another payload, after the
	// operation had succeeded: it must be refused (422), never answered with success.
	Mismatch bool
	// Probe marks the one delivery per operation sent after the run, once every lease had
	// expired, with no fault: it must succeed.
	Probe bool
	// NotRetained marks a success whose body is the gateway's "response not retained"
	// problem: the operation was executed, but its answer was larger than the gateway keeps,
	// so it is not replayed. Its body is nobody's execution and is not compared.
	NotRetained bool
	// Err is the client's error, if any.
	Err string
}

// Kill is a gateway process killed with SIGKILL.
type Kill struct {
	// Gateway names the killed process, as in Effect.Gateway.
	Gateway string
	// At is when the signal was sent.
	At time.Time
}

// Pause is a gateway process stopped with SIGSTOP and resumed with SIGCONT: while stopped it
// renews no lease, and once resumed it carries on as if nothing happened, so a claim it held
// may have been taken over and its later Complete must fail (fencing).
type Pause struct {
	// Gateway names the paused process, as in Effect.Gateway.
	Gateway string
	// From is when SIGSTOP was sent, To when SIGCONT was.
	From, To time.Time
}

// Outage is a time the store server was down (crashed and not yet restarted), or one gateway
// was cut off from it (its answers held back on the way): no holder cut off can renew its
// lease meanwhile.
type Outage struct {
	From, To time.Time
	// Gateway names the one gateway process cut off from the store; "" means the store
	// server itself was down, for every gateway.
	Gateway string
}

// Deploy is a gateway process stopped as a rolling deploy stops it: SIGTERM, then it drains
// (finishes or hands over what is in flight) and exits on its own. A graceful stop excuses no
// re-execution: a process that drains is not a process that died.
type Deploy struct {
	// Gateway names the process, as in Effect.Gateway.
	Gateway string
	// At is when SIGTERM was sent, Exited when the process had exited.
	At, Exited time.Time
}

// Stall is a time the harness's own process was not run for a while (a 20ms sleep that woke
// late): the machine was starved, and the gateways likely were too. A gateway starved past its
// lease can be taken over like a paused one, but the harness did not cause it, so a stall
// excuses nothing; the examples show the stalls near each execution they judge.
type Stall struct {
	At   time.Time     // when the late wake-up came
	Late time.Duration // how late it was
}

// HolderStall is a stall a gateway process reported about itself: the heartbeat of a claim it
// held was due in time but ran only after the claim's lease had ended (the engine logs "lease
// lapsed while this process was stalled"). The process was not scheduled (starved of CPU on a
// loaded machine, swapped out): to the other processes it was as good as paused past its
// lease, so its claim could be taken over while its request was out. The engine measures the
// stall from when the heartbeat was due, so a heartbeat scheduled too late (a bug) does not
// pass for a stall: only one with Stalled at least Lapsed is one.
type HolderStall struct {
	// Op is the operation whose claim lapsed, Gateway the process that held it.
	Op, Gateway string
	// At is when the heartbeat finally ran (the process was running again).
	At time.Time
	// Stalled is how late the heartbeat ran; Lapsed how long the lease had ended by then.
	Stalled, Lapsed time.Duration
}

// LostAnswer is an upstream answer that never reached the gateway whole although the
// upstream had acted (cut off on its way, cut short mid-body, or later than the gateway's
// upstream timeout): the gateway saw an uncertain outcome, which it must hold for its lease.
type LostAnswer struct {
	// Op is the operation whose answer was lost.
	Op string
	// Gateway names the gateway process that was waiting for it.
	Gateway string
	// At is when the answer was lost (or, for a slow answer, when the upstream acted).
	At time.Time
	// Cause says how it was lost, for the report ("dropped", "cut mid-body", "slow"…).
	Cause string
}

// Unstored is an execution whose answer the gateway sent to its client although it could not
// store it: its Complete failed (idem.ErrLeaseLost after a takeover, or the store was down).
// The middleware documents that the client still gets the response; the record stays in
// progress (or the successor's), so this execution's answer does not make it completed.
type Unstored struct {
	// Op is the operation, Gateway the process that executed it.
	Op, Gateway string
	// Err is the error the gateway reported.
	Err string
}

// Release is an operator's `idem release` of an operation's key during the run.
type Release struct {
	// Op is the operation whose key was released.
	Op string
	// At is when the command ran.
	At time.Time
	// Force reports --force, which deletes a completed record: the documented way to make
	// a key execute again. Only a forced release excuses re-executing a completed operation.
	Force bool
	// Done reports that the command released or deleted something (it exited 0).
	Done bool
	// Unknown reports a command that failed without saying what it did (the store went away
	// while it ran): the store may have released or deleted the record, as an operator who
	// saw the error must assume, so a forced one excuses like a done one.
	Unknown bool
}

// History is everything a run observed: the effect table, the clients' logs and the faults.
type History struct {
	Effects     []Effect
	Answers     []Answer
	Kills       []Kill
	Pauses      []Pause
	Outages     []Outage
	LostAnswers []LostAnswer
	Releases    []Release
	Stalls      []Stall
	// HolderStalls are the stalls past the lease the gateways reported about themselves.
	HolderStalls []HolderStall
	Unstored     []Unstored
	Deploys      []Deploy
	// Lease is the gateways' lease (default 2s). A holder that is cut off (killed, paused,
	// or unable to reach the store) keeps its claim until its lease runs out, and renews it
	// every third of it: a takeover cannot come before about two thirds of a lease after the
	// holder was cut off, and the verdict allows from half a lease on.
	Lease time.Duration
	// InFlight bounds how long before an execution's effect its holder may have been cut
	// off while the request was still on its way to the upstream (default 2s).
	InFlight time.Duration
	// UpstreamTimeout is the gateways' upstream timeout (default 4s). A drain that ends
	// while an upstream call is out cuts the call, and its key is kept until the call's
	// deadline plus the lease (the uncertain policy expire), no less.
	UpstreamTimeout time.Duration
}

// Verdict is the judgement of a History. The first group must be all zeros; the second group
// counts re-executions inside the windows idem documents (a holder that
// is gone past its lease is taken over, and an uncertain outcome is held for the lease, then
// taken over; an operator's forced release makes a completed key execute again); the rest
// describe the run.
//
// A re-execution is excused only when the execution before it was never completed (no client
// ever got its answer, live or replayed: the gateway answers only once the record is stored)
// and, in the lease that followed it, its own gateway process was killed, paused past its
// lease, reported that it stalled past its lease, cut off from the store past its lease, or
// lost the upstream's answer; or when an operator force-released the completed key in between.
// A stall only the harness saw (its own process woke late) excuses nothing.
type Verdict struct {
	// UnexplainedDoubles counts executions beyond an operation's first that no excuse above
	// explains.
	UnexplainedDoubles int
	// SuccessWithoutEffect counts successful answers whose body is not the answer of any
	// recorded execution of the operation (a success that did not happen, or a corrupt replay).
	SuccessWithoutEffect int
	// DifferingReplays counts operations whose successful answers differ from one another,
	// with no forced release to explain it.
	DifferingReplays int
	// MismatchAccepted counts deliveries with another payload that were answered with success.
	MismatchAccepted int
	// StuckKeys counts operations whose probe, sent after every lease had expired, was not
	// answered with success.
	StuckKeys int
	// MismatchTakeovers counts deliveries with another payload that executed where a
	// re-execution of the operation is excused (its earlier execution was never completed:
	// its holder was killed or paused, its answer lost or not stored; or an operator forced a
	// release): the key was free, so the other payload rightly ran, and the probe after it
	// rightly gets 422. Its execution is judged with the operation's others.
	MismatchTakeovers int
	// CrossTenant counts successful answers whose body is an execution made for another
	// tenant: one caller got another's record.
	CrossTenant int
	// DrainedDoubles counts the unexplained re-executions whose earlier execution's gateway
	// was stopped by a rolling deploy (SIGTERM and drain) around it: part of
	// UnexplainedDoubles, counted apart to show where they come from. A drain that lets a
	// claim lapse while its upstream call may still run lands here.
	DrainedDoubles int

	// CrashTakeovers counts re-executions after a kill -9 of the previous execution's gateway.
	CrashTakeovers int
	// PauseTakeovers counts re-executions after the previous execution's gateway was paused
	// past its lease.
	PauseTakeovers int
	// StallTakeovers counts re-executions after the previous execution's gateway reported that
	// it had stalled past its lease (see HolderStall), or executions by a gateway that had
	// just done so and was never completed.
	StallTakeovers int
	// OutageTakeovers counts re-executions after the store was down past the lease while the
	// previous execution's holder waited to complete it.
	OutageTakeovers int
	// UncertainTakeovers counts re-executions after the previous execution's answer was lost
	// on its way to the gateway, once the uncertain outcome had been held for the lease.
	UncertainTakeovers int
	// OperatorReexecutions counts re-executions after an operator force-released the
	// completed key.
	OperatorReexecutions int
	// DrainCutTakeovers counts re-executions of an execution never completed whose gateway
	// drained and exited while it ran, no sooner than the upstream call's deadline plus the
	// lease after it: the drain cut the call and kept the key that long (an uncertain outcome).
	// Sooner, the drain let the claim lapse under a call that may still have run: unexplained.
	DrainCutTakeovers int

	// Ops is how many operations were sent; Executed how many have at least one effect.
	Ops, Executed int
	// Effects is how many executions the upstream recorded.
	Effects int
	// Deliveries counts the client deliveries (mismatches and probes excluded); Succeeded how
	// many ended in success, Replayed how many of those were replays.
	Deliveries, Succeeded, Replayed int
	// GaveUp counts deliveries that ended without success, by final status (0: network error).
	GaveUp map[int]int
	// Mismatches and Probes count those deliveries.
	Mismatches, Probes int
	// NotRetained counts successes that said the answer was not retained (too large).
	NotRetained int
	// UnstoredAnswers counts live successes that carried an execution the gateway could not
	// store (see Unstored): true, but not what a replay of the key returns.
	UnstoredAnswers int
	// DoubledOps lists the operations with an unexplained re-execution, sorted.
	DoubledOps []string
	// Examples describes the first MaxExamples violations, for diagnosis.
	Examples []string
}

// MaxExamples is how many violations a Verdict describes in Examples.
const MaxExamples = 20

func (v *Verdict) example(format string, args ...any) {
	if len(v.Examples) < MaxExamples {
		v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
	}
}

func clip(b []byte) string {
	if len(b) > 160 {
		return string(b[:160]) + "…"
	}
	return string(b)
}

// OK reports whether every must-be-zero count is zero.
func (v Verdict) OK() bool {
	return v.UnexplainedDoubles == 0 && v.SuccessWithoutEffect == 0 && v.DifferingReplays == 0 &&
		v.MismatchAccepted == 0 && v.StuckKeys == 0 && v.CrossTenant == 0
}

func success(status int) bool { return status >= 200 && status < 300 }

// excuse names the documented window a re-execution falls in.
type excuse int

const (
	unexplained excuse = iota
	crash
	pause
	outage
	uncertain
	operator
	drainCut
	stalled
)

// judge holds a History indexed for Judge.
type judge struct {
	lease, inFlight, upstreamTimeout time.Duration
	effects                          map[string][]Effect
	answers                          map[string][]Answer
	kills                            map[string][]time.Time
	pauses                           map[string][]Pause
	outages                          []Outage
	lost                             map[[2]string][]*LostAnswer // by op and gateway; nil once used
	forced                           map[string][]*Release       // forced releases that deleted, by op; nil once used
	releases                         map[string][]Release        // every release, by op, for the examples
	stalls                           []Stall
	holderStalls                     map[[2]string][]HolderStall // by op and gateway
	unstored                         map[[2]string]bool          // by op and gateway
	byBody                           map[string]Effect           // every execution, by its answer's body
	deploys                          map[string][]Deploy
}

func newJudge(h History) *judge {
	j := &judge{
		lease: cmp.Or(h.Lease, 2*time.Second), inFlight: cmp.Or(h.InFlight, 2*time.Second),
		upstreamTimeout: cmp.Or(h.UpstreamTimeout, 4*time.Second),
		effects:         map[string][]Effect{}, answers: map[string][]Answer{}, kills: map[string][]time.Time{},
		pauses: map[string][]Pause{}, outages: h.Outages, lost: map[[2]string][]*LostAnswer{}, forced: map[string][]*Release{}, releases: map[string][]Release{}, stalls: h.Stalls,
		unstored: map[[2]string]bool{}, byBody: map[string]Effect{}, deploys: map[string][]Deploy{},
		holderStalls: map[[2]string][]HolderStall{},
	}
	for _, st := range h.HolderStalls {
		if st.Lapsed > 0 && st.Stalled >= st.Lapsed {
			k := [2]string{st.Op, st.Gateway}
			j.holderStalls[k] = append(j.holderStalls[k], st)
		}
	}
	for _, d := range h.Deploys {
		j.deploys[d.Gateway] = append(j.deploys[d.Gateway], d)
	}
	for _, u := range h.Unstored {
		j.unstored[[2]string{u.Op, u.Gateway}] = true
	}
	for _, e := range h.Effects {
		j.effects[e.Op] = append(j.effects[e.Op], e)
		j.byBody[string(e.Body)] = e
	}
	for _, a := range h.Answers {
		j.answers[a.Op] = append(j.answers[a.Op], a)
	}
	for _, k := range h.Kills {
		j.kills[k.Gateway] = append(j.kills[k.Gateway], k.At)
	}
	for _, p := range h.Pauses {
		j.pauses[p.Gateway] = append(j.pauses[p.Gateway], p)
	}
	for _, l := range h.LostAnswers {
		j.lost[[2]string{l.Op, l.Gateway}] = append(j.lost[[2]string{l.Op, l.Gateway}], &l)
	}
	for _, r := range h.Releases {
		if r.Force && (r.Done || r.Unknown) {
			j.forced[r.Op] = append(j.forced[r.Op], &r)
		}
		j.releases[r.Op] = append(j.releases[r.Op], r)
	}
	return j
}

// completed reports whether e's record was completed: some client got e's answer as a
// replay, or live from a gateway that did not report that it could not store it (the gateway
// answers once the record is stored, or, if storing failed, says so in its log).
func (j *judge) completed(e Effect) bool {
	unstored := j.unstored[[2]string{e.Op, e.Gateway}]
	return slices.ContainsFunc(j.answers[e.Op], func(a Answer) bool {
		return success(a.Status) && bytes.Equal(a.Body, e.Body) && (a.Replayed || !unstored)
	})
}

// lastRenewal is when a holder killed at t could last have renewed its lease: t, or, when it
// died during a store outage or before it could renew after one (the engine tries a failed
// extension again every eighth of a heartbeat; a lease/8 covers that and a reconnection), the
// outage's start. Its lease then runs out a lease after that, not after the kill.
func (j *judge) lastRenewal(gateway string, t time.Time) time.Time {
	for _, o := range j.outages {
		if (o.Gateway == "" || o.Gateway == gateway) && !t.Before(o.From) && !t.After(o.To.Add(j.lease/8)) && o.From.Before(t) {
			t = o.From
		}
	}
	return t
}

// cutOff reports whether t, when prev's holder was cut off, can explain next: the holder was
// cut off no earlier than while prev's request was on its way, and at least half a lease
// before next (the claim had to expire first).
func (j *judge) cutOff(t time.Time, prev, next Effect) bool {
	return !t.Before(prev.At.Add(-j.inFlight)) && !t.After(next.At.Add(-j.lease/2))
}

// lateAfterPause reports whether next was run by a holder that had just been paused past its
// lease, and was never completed: the holder's claim was taken over while it was stopped, it
// sent the request once resumed, and its completion was refused.
func (j *judge) lateAfterPause(next Effect) bool {
	return !j.completed(next) && slices.ContainsFunc(j.pauses[next.Gateway], func(p Pause) bool {
		return p.To.Sub(p.From) >= j.lease && !p.To.After(next.At) && !p.To.Before(next.At.Add(-j.inFlight))
	})
}

// lateAfterStall reports whether next was run by a holder that reported a stall past its
// lease on next's operation around when next's request went out, and was never completed:
// like a paused holder, it sent the request as it woke, after its claim was taken over.
func (j *judge) lateAfterStall(next Effect) bool {
	return !j.completed(next) && slices.ContainsFunc(j.holderStalls[[2]string{next.Op, next.Gateway}], func(st HolderStall) bool {
		return !st.At.Add(-st.Stalled).After(next.At) && !st.At.Before(next.At.Add(-j.inFlight))
	})
}

// stalledHolder reports whether prev's holder reported a stall past its lease on prev's
// operation that began before next ran and ended no sooner than while prev's request was on
// its way: its claim lapsed under it, and next took the key over.
func (j *judge) stalledHolder(prev, next Effect) bool {
	return slices.ContainsFunc(j.holderStalls[[2]string{prev.Op, prev.Gateway}], func(st HolderStall) bool {
		return !st.At.Before(prev.At.Add(-j.inFlight)) && !st.At.Add(-st.Stalled).After(next.At)
	})
}

// explain classifies next, the execution after prev of the same operation.
func (j *judge) explain(prev, next Effect) excuse {
	if j.lateAfterPause(next) {
		return pause
	}
	if j.lateAfterStall(next) {
		return stalled
	}
	if j.completed(prev) {
		// Only an operator's forced release makes a completed key execute again.
		for i, r := range j.forced[prev.Op] {
			if r != nil && !r.At.Before(prev.At) && r.At.Before(next.At) {
				j.forced[prev.Op][i] = nil
				return operator
			}
		}
		return unexplained
	}
	lost := j.lost[[2]string{prev.Op, prev.Gateway}]
	for i, l := range lost {
		if l != nil && j.cutOff(l.At, prev, next) {
			lost[i] = nil
			return uncertain
		}
	}
	if slices.ContainsFunc(j.kills[prev.Gateway], func(t time.Time) bool { return j.cutOff(j.lastRenewal(prev.Gateway, t), prev, next) }) {
		return crash
	}
	if slices.ContainsFunc(j.pauses[prev.Gateway], func(p Pause) bool {
		// The holder was stopped past its lease at some time while prev's request was on its
		// way or after, and early enough for the claim to lapse before next: the pause may
		// have begun before prev's request left (a request held by the stopped process goes
		// out once it resumes).
		return p.To.Sub(p.From) >= j.lease && !p.To.Before(prev.At.Add(-j.inFlight)) && !p.From.After(next.At.Add(-j.lease/2))
	}) {
		return pause
	}
	if j.stalledHolder(prev, next) {
		return stalled
	}
	if len(j.drained(prev, next)) > 0 && !next.At.Before(prev.At.Add(j.upstreamTimeout+j.lease)) {
		return drainCut
	}
	if slices.ContainsFunc(j.outages, func(o Outage) bool {
		return (o.Gateway == "" || o.Gateway == prev.Gateway) && o.To.Sub(o.From) >= j.lease/2 && !o.To.Before(prev.At.Add(-j.inFlight)) && !o.From.After(next.At.Add(-j.lease/2))
	}) {
		return outage
	}
	return unexplained
}

// nearby describes the faults recorded around an unexplained re-execution that did not meet
// an excuse's conditions, for diagnosis: lost answers of the holder and store outages, with
// their times relative to the earlier execution.
func (j *judge) nearby(prev, next Effect) string {
	var parts []string
	for _, l := range j.lost[[2]string{prev.Op, prev.Gateway}] {
		if l != nil {
			parts = append(parts, fmt.Sprintf("answer lost (%s) at %+dms", l.Cause, l.At.Sub(prev.At).Milliseconds()))
		}
	}
	// The outages around either execution (not every one between them, which may be many).
	near := func(o Outage, t time.Time) bool {
		return !o.To.Before(t.Add(-j.inFlight)) && !o.From.After(t.Add(j.inFlight))
	}
	for _, o := range j.outages {
		if near(o, prev.At) || near(o, next.At) {
			what := "store down"
			if o.Gateway != "" {
				what = o.Gateway + " cut off from the store"
			}
			parts = append(parts, fmt.Sprintf("%s from %+dms to %+dms", what, o.From.Sub(prev.At).Milliseconds(), o.To.Sub(prev.At).Milliseconds()))
		}
	}
	for _, d := range j.drained(prev, next) {
		parts = append(parts, fmt.Sprintf("holder %s drained by a deploy: SIGTERM at %+dms, exited at %+dms", d.Gateway, d.At.Sub(prev.At).Milliseconds(), d.Exited.Sub(prev.At).Milliseconds()))
	}
	for _, k := range j.kills[prev.Gateway] {
		if !k.Before(prev.At.Add(-j.inFlight)) && !k.After(next.At) {
			parts = append(parts, fmt.Sprintf("holder %s killed at %+dms", prev.Gateway, k.Sub(prev.At).Milliseconds()))
		}
	}
	for _, st := range j.stalls {
		if !st.At.Before(prev.At.Add(-j.inFlight)) && !st.At.Add(-st.Late).After(next.At) {
			parts = append(parts, fmt.Sprintf("machine stalled %dms until %+dms", st.Late.Milliseconds(), st.At.Sub(prev.At).Milliseconds()))
		}
	}
	for _, r := range j.releases[prev.Op] {
		what := "failed"
		switch {
		case r.Done:
			what = "done"
		case r.Unknown:
			what = "outcome unknown"
		}
		parts = append(parts, fmt.Sprintf("operator release (force %v, %s) at %+dms", r.Force, what, r.At.Sub(prev.At).Milliseconds()))
	}
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, "; ") + "]"
}

// drained returns the deploys of prev's gateway that stopped it while prev's request was on
// its way or after, and before next.
func (j *judge) drained(prev, next Effect) []Deploy {
	var out []Deploy
	for _, d := range j.deploys[prev.Gateway] {
		if !d.Exited.Before(prev.At.Add(-j.inFlight)) && d.At.Before(next.At) {
			out = append(out, d)
		}
	}
	return out
}

// reexecutions judges every execution of op after its first; it reports whether one was an
// operator's doing (then clients may rightly have seen two answers).
func (j *judge) reexecutions(v *Verdict, es []Effect) (forced bool) {
	for i := 1; i < len(es); i++ {
		prev, next := es[i-1], es[i]
		switch j.explain(prev, next) {
		case crash:
			v.CrashTakeovers++
		case pause:
			v.PauseTakeovers++
		case outage:
			v.OutageTakeovers++
		case uncertain:
			v.UncertainTakeovers++
		case operator:
			v.OperatorReexecutions++
			forced = true
		case drainCut:
			v.DrainCutTakeovers++
		case stalled:
			v.StallTakeovers++
		default:
			v.UnexplainedDoubles++
			if len(j.drained(prev, next)) > 0 {
				v.DrainedDoubles++
			}
			if !slices.Contains(v.DoubledOps, next.Op) {
				v.DoubledOps = append(v.DoubledOps, next.Op)
			}
			why := "no kill, pause past the lease, store outage or lost answer of its holder explains it"
			if j.completed(prev) {
				why = "the earlier execution's record had been completed (a client got its answer)"
			}
			v.example("%s executed again (%s by %s at %s) after %s by %s at %s: %s%s", next.Op,
				next.ID, next.Gateway, next.At.Format(time.RFC3339Nano), prev.ID, prev.Gateway, prev.At.Format(time.RFC3339Nano), why,
				j.nearby(prev, next))
		}
	}
	return forced
}

// answersOf judges the answers the clients got for op, whose executions are es.
func (j *judge) answersOf(v *Verdict, op string, es []Effect, forced bool) {
	// A mismatched delivery that executed as a re-execution the judgement excused (it is one
	// of es after the first, and op has no unexplained double) found its key free.
	freed := false
	for _, a := range j.answers[op] {
		if a.Mismatch && success(a.Status) && !slices.Contains(v.DoubledOps, op) &&
			slices.IndexFunc(es, func(e Effect) bool { return bytes.Equal(e.Body, a.Body) }) > 0 {
			freed = true
		}
	}
	var bodies [][]byte
	for _, a := range j.answers[op] {
		switch {
		case a.Probe:
			v.Probes++
			if !success(a.Status) && !(freed && a.Status == http.StatusUnprocessableEntity) {
				v.StuckKeys++
				v.example("%s stuck: the probe got %d %s %s", op, a.Status, a.Err, clip(a.Body))
			}
		case a.Mismatch:
			v.Mismatches++
			switch {
			case !success(a.Status):
			case freed && slices.IndexFunc(es, func(e Effect) bool { return bytes.Equal(e.Body, a.Body) }) > 0:
				v.MismatchTakeovers++
			default:
				v.MismatchAccepted++
				v.example("%s: another payload was answered %d %s", op, a.Status, clip(a.Body))
			}
			continue
		default:
			v.Deliveries++
			if !success(a.Status) {
				v.GaveUp[a.Status]++
				continue
			}
			v.Succeeded++
			if a.Replayed {
				v.Replayed++
			}
		}
		if !success(a.Status) {
			continue
		}
		if a.NotRetained {
			v.NotRetained++
			continue
		}
		i := slices.IndexFunc(es, func(e Effect) bool { return bytes.Equal(e.Body, a.Body) })
		if other, ok := j.byBody[string(a.Body)]; i < 0 && ok && other.Tenant != a.Tenant {
			v.CrossTenant++
			v.example("%s: tenant %q got %s, an execution of %s for tenant %q", op, a.Tenant, other.ID, other.Op, other.Tenant)
		} else if i < 0 {
			v.SuccessWithoutEffect++
			v.example("%s: success %s matches no recorded execution", op, clip(a.Body))
		} else if !a.Replayed && j.unstored[[2]string{op, es[i].Gateway}] {
			v.UnstoredAnswers++
			continue
		}
		if !slices.ContainsFunc(bodies, func(b []byte) bool { return bytes.Equal(b, a.Body) }) {
			bodies = append(bodies, a.Body)
		}
	}
	if len(bodies) > 1 && !forced {
		v.DifferingReplays++
		v.example("%s: %d different successful answers", op, len(bodies))
	}
}

// Judge computes the verdict of h.
func Judge(h History) Verdict {
	j := newJudge(h)
	v := Verdict{GaveUp: map[int]int{}, Effects: len(h.Effects)}
	set := map[string]bool{}
	for op := range j.effects {
		set[op] = true
	}
	for op := range j.answers {
		set[op] = true
	}
	ops := slices.Sorted(maps.Keys(set))
	v.Ops = len(ops)
	for _, op := range ops {
		es := j.effects[op]
		sort.SliceStable(es, func(i, k int) bool { return es[i].At.Before(es[k].At) })
		if len(es) > 0 {
			v.Executed++
		}
		forced := j.reexecutions(&v, es)
		j.answersOf(&v, op, es, forced)
	}
	return v
}

// Report writes the verdict as a table: the must-be-zero counts, the documented windows, and
// the run's figures.
func (v Verdict) Report(w io.Writer) {
	verdict := "PASS"
	if !v.OK() {
		verdict = "FAIL"
	}
	var gave []string
	for _, s := range slices.Sorted(maps.Keys(v.GaveUp)) {
		name := fmt.Sprint(s)
		if s == 0 {
			name = "network error"
		}
		gave = append(gave, fmt.Sprintf("%s: %d", name, v.GaveUp[s]))
	}
	fmt.Fprintf(w, "verdict: %s\n", verdict)
	fmt.Fprintf(w, "  effects executed more than once, unexplained  %d (must be 0)\n", v.UnexplainedDoubles)
	fmt.Fprintf(w, "  successes whose effect is missing             %d (must be 0)\n", v.SuccessWithoutEffect)
	fmt.Fprintf(w, "  replays that differ from the original         %d (must be 0)\n", v.DifferingReplays)
	fmt.Fprintf(w, "  other payload under a used key accepted       %d (must be 0)\n", v.MismatchAccepted)
	fmt.Fprintf(w, "  stuck keys after the leases expired           %d (must be 0)\n", v.StuckKeys)
	fmt.Fprintf(w, "  answers that belong to another tenant         %d (must be 0)\n", v.CrossTenant)
	if v.DrainedDoubles > 0 {
		fmt.Fprintf(w, "  of the unexplained, after a graceful drain    %d (never excused)\n", v.DrainedDoubles)
	}
	fmt.Fprintf(w, "documented windows (each only for an execution never completed, or forced):\n")
	fmt.Fprintf(w, "  re-executions after a gateway kill -9         %d\n", v.CrashTakeovers)
	fmt.Fprintf(w, "  re-executions after a pause past the lease    %d\n", v.PauseTakeovers)
	if v.StallTakeovers > 0 {
		fmt.Fprintf(w, "  re-executions after a holder stalled past it  %d (reported by the holder)\n", v.StallTakeovers)
	}
	fmt.Fprintf(w, "  re-executions after a store outage            %d\n", v.OutageTakeovers)
	fmt.Fprintf(w, "  re-executions after a lost upstream answer    %d\n", v.UncertainTakeovers)
	fmt.Fprintf(w, "  re-executions after a forced release          %d\n", v.OperatorReexecutions)
	if v.DrainCutTakeovers > 0 {
		fmt.Fprintf(w, "  re-executions after a drain cut the call      %d (past its deadline and the lease)\n", v.DrainCutTakeovers)
	}
	if v.MismatchTakeovers > 0 {
		fmt.Fprintf(w, "  other payloads run on a key freed as above    %d (their probe answered 422)\n", v.MismatchTakeovers)
	}
	fmt.Fprintf(w, "run:\n")
	fmt.Fprintf(w, "  operations %d, executed %d, effects recorded %d\n", v.Ops, v.Executed, v.Effects)
	fmt.Fprintf(w, "  deliveries %d: succeeded %d (replayed %d), gave up %d [%s]\n",
		v.Deliveries, v.Succeeded, v.Replayed, v.Deliveries-v.Succeeded, strings.Join(gave, ", "))
	fmt.Fprintf(w, "  mismatched deliveries %d, probes after the run %d, successes not retained (too large) %d\n", v.Mismatches, v.Probes, v.NotRetained)
	fmt.Fprintf(w, "  live answers of executions the gateway could not store (lease lost, store down) %d\n", v.UnstoredAnswers)
	if len(v.Examples) > 0 {
		fmt.Fprintf(w, "violations (first %d):\n", len(v.Examples))
		for _, e := range v.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}
