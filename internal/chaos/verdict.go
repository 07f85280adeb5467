package chaos

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
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
	// At is when the upstream recorded the effect.
	At time.Time
	// Body is the exact answer body the upstream sent for this execution.
	Body []byte
}

// Answer is what a client finally got for one delivery of an operation (after its retries).
type Answer struct {
	// Op is the operation.
	Op string
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

// LostAnswer is an upstream answer cut off on its way back to the gateway (the upstream had
// acted): the gateway saw an uncertain outcome.
type LostAnswer struct {
	// Op is the operation whose answer was lost.
	Op string
	// Gateway names the gateway process that was waiting for it.
	Gateway string
	// At is when the answer was cut off.
	At time.Time
}

// History is everything a run observed: the effect table, the clients' logs and the faults.
type History struct {
	Effects     []Effect
	Answers     []Answer
	Kills       []Kill
	LostAnswers []LostAnswer
	// KillBefore and KillAfter bound when a kill explains a re-execution: the previous
	// execution's gateway was killed from KillBefore before that execution's effect (the
	// request was still on its way to the upstream) to KillAfter after it (the gateway had not
	// stored the result yet). Defaults 2s and 11s (the engine retries a completion for up to
	// 10s during a store outage).
	KillBefore, KillAfter time.Duration
}

// Verdict is the judgement of a History. The first group must be all zeros; the second group
// counts re-executions inside the windows the design documents (invariant 1: a holder that
// died, or an outcome held as uncertain, is taken over once its lease expires); the rest
// describe the run.
type Verdict struct {
	// UnexplainedDoubles counts executions beyond an operation's first that neither a kill
	// of the previous executor's gateway nor a lost upstream answer explains.
	UnexplainedDoubles int
	// SuccessWithoutEffect counts successful answers whose body is not the answer of any
	// recorded execution of the operation (a success that did not happen, or a corrupt replay).
	SuccessWithoutEffect int
	// DifferingReplays counts operations whose successful answers differ from one another,
	// outside the crash window.
	DifferingReplays int
	// MismatchAccepted counts deliveries with another payload that were answered with success.
	MismatchAccepted int
	// StuckKeys counts operations whose probe, sent after every lease had expired, was not
	// answered with success.
	StuckKeys int

	// CrashTakeovers counts re-executions explained by a kill -9 of the gateway that ran the
	// previous execution before it stored the result.
	CrashTakeovers int
	// UncertainTakeovers counts re-executions explained by the upstream's answer to the
	// previous execution being lost on its way to the gateway.
	UncertainTakeovers int
	// SupersededAnswers counts operations where a client received the answer of an execution
	// that a crash takeover then superseded (so clients saw two different successes).
	SupersededAnswers int

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
		v.MismatchAccepted == 0 && v.StuckKeys == 0
}

func success(status int) bool { return status >= 200 && status < 300 }

// Judge computes the verdict of h.
func Judge(h History) Verdict {
	before := cmp.Or(h.KillBefore, 2*time.Second)
	after := cmp.Or(h.KillAfter, 11*time.Second)
	v := Verdict{GaveUp: map[int]int{}}

	effects := map[string][]Effect{}
	for _, e := range h.Effects {
		effects[e.Op] = append(effects[e.Op], e)
	}
	kills := map[string][]time.Time{}
	for _, k := range h.Kills {
		kills[k.Gateway] = append(kills[k.Gateway], k.At)
	}
	lost := map[[2]string]int{}
	for _, l := range h.LostAnswers {
		lost[[2]string{l.Op, l.Gateway}]++
	}
	answers := map[string][]Answer{}
	for _, a := range h.Answers {
		answers[a.Op] = append(answers[a.Op], a)
	}
	ops := map[string]bool{}
	for op := range effects {
		ops[op] = true
	}
	for op := range answers {
		ops[op] = true
	}
	v.Ops = len(ops)
	v.Effects = len(h.Effects)

	for op := range ops {
		es := effects[op]
		sort.SliceStable(es, func(i, j int) bool { return es[i].At.Before(es[j].At) })
		if len(es) > 0 {
			v.Executed++
		}
		crashed := false
		for i := 1; i < len(es); i++ {
			prev := es[i-1]
			key := [2]string{op, prev.Gateway}
			switch {
			case lost[key] > 0:
				lost[key]--
				v.UncertainTakeovers++
			case slices.ContainsFunc(kills[prev.Gateway], func(t time.Time) bool {
				return !t.Before(prev.At.Add(-before)) && !t.After(prev.At.Add(after))
			}):
				v.CrashTakeovers++
				crashed = true
			default:
				v.UnexplainedDoubles++
				v.example("%s executed again (%s at %s) after %s at %s, with no kill or lost answer to explain it",
					op, es[i].ID, es[i].At.Format(time.RFC3339Nano), prev.ID, prev.At.Format(time.RFC3339Nano))
			}
		}
		var bodies [][]byte
		for _, a := range answers[op] {
			switch {
			case a.Probe:
				v.Probes++
				if !success(a.Status) {
					v.StuckKeys++
					v.example("%s stuck: the probe got %d %s %s", op, a.Status, a.Err, clip(a.Body))
				}
			case a.Mismatch:
				v.Mismatches++
				if success(a.Status) {
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
			if !slices.ContainsFunc(es, func(e Effect) bool { return bytes.Equal(e.Body, a.Body) }) {
				v.SuccessWithoutEffect++
				v.example("%s: success %s matches no recorded execution", op, clip(a.Body))
			}
			if !slices.ContainsFunc(bodies, func(b []byte) bool { return bytes.Equal(b, a.Body) }) {
				bodies = append(bodies, a.Body)
			}
		}
		if len(bodies) > 1 {
			if crashed {
				v.SupersededAnswers++
			} else {
				v.DifferingReplays++
				v.example("%s: %d different successful answers", op, len(bodies))
			}
		}
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
	fmt.Fprintf(w, "documented at-least-once windows (invariant 1):\n")
	fmt.Fprintf(w, "  re-executions after a gateway kill -9         %d\n", v.CrashTakeovers)
	fmt.Fprintf(w, "  re-executions after a lost upstream answer    %d\n", v.UncertainTakeovers)
	fmt.Fprintf(w, "  ops whose clients saw a superseded answer     %d\n", v.SupersededAnswers)
	fmt.Fprintf(w, "run:\n")
	fmt.Fprintf(w, "  operations %d, executed %d, effects recorded %d\n", v.Ops, v.Executed, v.Effects)
	fmt.Fprintf(w, "  deliveries %d: succeeded %d (replayed %d), gave up %d [%s]\n",
		v.Deliveries, v.Succeeded, v.Replayed, v.Deliveries-v.Succeeded, strings.Join(gave, ", "))
	fmt.Fprintf(w, "  mismatched deliveries %d, probes after the run %d\n", v.Mismatches, v.Probes)
	if len(v.Examples) > 0 {
		fmt.Fprintf(w, "violations (first %d):\n", len(v.Examples))
		for _, e := range v.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}
