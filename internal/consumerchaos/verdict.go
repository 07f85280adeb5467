package consumerchaos

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// Mode is how the consumers run their effect.
type Mode string

const (
	// Tx is transaction mode: the claim, the effect row and the completion commit in one
	// PostgreSQL transaction (pgstore.NewTxRunner). Nothing excuses a second effect.
	Tx Mode = "tx"
	// Engine is the plain engine: the effect row is written outside the store's transactions,
	// checked by nothing but idem's claim. A holder that dies, stalls past its lease or cannot
	// store its completion after the effect may see its effect run again (the documented
	// at-least-once windows), and only then.
	Engine Mode = "engine"
)

// Effect is one execution of a fact's effect: one row in the effects table, never merged.
type Effect struct {
	// Fact is the business fact (the idempotency key before the consumer's scope).
	Fact string
	// Worker names the consumer process (slot and incarnation) that ran it.
	Worker string
	// At is when the worker wrote the row.
	At time.Time
}

// Delivery is what a worker's Consumer.Handle returned for one delivery, as its Observe hook
// logged it before the adapter settled the message.
type Delivery struct {
	Fact, Worker string
	At           time.Time
	// Outcome is the consumer.Outcome's String.
	Outcome string
	// Unstored marks a Processed result with an error: the effect ran, but its record could
	// not be completed (the store was cut off, or the claim was taken over).
	Unstored bool
	// Takeover reports a delivery that took over a lapsed claim.
	Takeover bool
}

// Kill is a worker process killed with SIGKILL, by the harness or by itself.
type Kill struct {
	Worker string
	At     time.Time
	// Where says when it died: "mid-effect" (after its effect row, before the completion),
	// "before-ack" (after the completion, before the ack) or "random" (the harness's signal).
	Where string
}

// Pause is a worker stopped with SIGSTOP and resumed with SIGCONT.
type Pause struct {
	Worker   string
	From, To time.Time
}

// Cut is a moment every connection through one of the harness's relays was reset.
type Cut struct {
	At time.Time
	// What is "store" (workers ↔ PostgreSQL) or "broker" (workers ↔ the broker).
	What string
}

// History is everything a run observed.
type History struct {
	Mode Mode
	// Facts lists every fact published; Messages counts the messages published (a fact
	// published twice, with two message ids, counts twice).
	Facts    []string
	Messages int
	// Undrained is how many messages the broker still held, ready or unacked, once the
	// consumers had stopped for good.
	Undrained  int
	Effects    []Effect
	Deliveries []Delivery
	Kills      []Kill
	Pauses     []Pause
	Cuts       []Cut
	// Lease is the engine's lease (default 2s); InFlight bounds how long before an effect row
	// its worker may have been stopped while it was on its way (default 2s).
	Lease, InFlight time.Duration
}

// Verdict judges a History. The first group must be all zeros. The second group counts, in
// engine mode only, re-executions inside the windows idem documents for a holder that is gone
// before its completion is stored; in transaction mode every re-execution is unexplained.
type Verdict struct {
	// UnexplainedDoubles counts effects beyond a fact's first that no excuse explains.
	UnexplainedDoubles int
	// Lost counts published facts with no effect at the end.
	Lost int
	// Phantoms counts effects of facts never published.
	Phantoms int
	// Rejected counts deliveries the consumer dead-lettered (a fact's copies carry the same
	// business fields, so none may be).
	Rejected int
	// Undrained is how many messages the broker still held at the end.
	Undrained int

	// CrashTakeovers counts re-executions after the previous execution's worker was killed
	// before it stored the completion.
	CrashTakeovers int
	// PauseTakeovers counts re-executions after the previous execution's worker was stopped
	// past its lease, or by a worker just resumed from such a stop (its claim had lapsed).
	PauseTakeovers int
	// UnstoredTakeovers counts re-executions after the previous execution's worker logged
	// that its effect ran but its completion could not be stored (the store was cut off),
	// and late effects of a worker cut off from the store past its lease, whose completion
	// was then refused.
	UnstoredTakeovers int

	// Facts, Messages and Effects count what was published and executed.
	Facts, Messages, Effects int
	// Outcomes counts the deliveries by outcome.
	Outcomes map[string]int
	// Kills counts the worker kills by where they fell; Pauses the pauses past the lease;
	// Cuts the relay cuts by relay.
	Kills          map[string]int
	Pauses         int
	Cuts           map[string]int
	DoubledFacts   []string
	Examples       []string
	Mode           Mode
	UnstoredLogged int
}

// MaxExamples is how many violations a Verdict describes.
const MaxExamples = 20

func (v *Verdict) example(format string, args ...any) {
	if len(v.Examples) < MaxExamples {
		v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
	}
}

// OK reports whether every must-be-zero count is zero.
func (v Verdict) OK() bool {
	return v.UnexplainedDoubles == 0 && v.Lost == 0 && v.Phantoms == 0 && v.Rejected == 0 && v.Undrained == 0
}

type judge struct {
	h               History
	lease, inFlight time.Duration
	deliveries      map[[2]string][]Delivery // by fact and worker
	byFact          map[string][]Effect
	kills           map[string][]time.Time
	pauses          map[string][]Pause
}

// logged reports whether e's worker logged a Processed result, with or without an unstored
// completion as unstored says, after e and before that worker's next execution of the fact
// (whose result it would be).
func (j *judge) logged(e Effect, unstored bool) bool {
	var until time.Time
	for _, o := range j.byFact[e.Fact] {
		if o.Worker == e.Worker && o.At.After(e.At) && (until.IsZero() || o.At.Before(until)) {
			until = o.At
		}
	}
	return slices.ContainsFunc(j.deliveries[[2]string{e.Fact, e.Worker}], func(d Delivery) bool {
		return d.Outcome == "executed" && d.Unstored == unstored && !d.At.Before(e.At) && (until.IsZero() || d.At.Before(until))
	})
}

// completed reports whether e's completion was stored, as its worker logged.
func (j *judge) completed(e Effect) bool { return j.logged(e, false) }

// unstored reports whether e's worker logged that e's completion could not be stored.
func (j *judge) unstored(e Effect) bool { return j.logged(e, true) }

// lastRenewal is how early a holder stopped at t may have renewed its claim for the last
// time: t itself, or the earliest store cut in the half lease before t (a renewal due after a
// cut may have failed, and the next comes a third of a lease later), or the earliest of a run
// of such cuts. A takeover comes a lease after the last renewal; the verdict allows from half
// a lease on.
func (j *judge) lastRenewal(t time.Time) time.Time {
	// Cuts in a row, each within half a lease of the next, may have failed every renewal.
	for moved := true; moved; {
		moved = false
		for _, c := range j.h.Cuts {
			if c.What == "store" && c.At.Before(t) && !c.At.Before(t.Add(-j.lease/2)) {
				t, moved = c.At, true
			}
		}
	}
	return t
}

func (j *judge) explain(prev, next Effect) string {
	if j.h.Mode != Engine {
		return "" // transaction mode: the effect commits with its completion, or not at all
	}
	// A worker resumed from a stop past its lease may write the effect of a claim that was
	// taken over meanwhile (the handler was already running when it stopped); its completion
	// is then refused.
	if !j.completed(next) && slices.ContainsFunc(j.pauses[next.Worker], func(p Pause) bool {
		return p.To.Sub(p.From) >= j.lease && !p.To.After(next.At) && !p.To.Before(next.At.Add(-j.inFlight))
	}) {
		return "pause"
	}
	// Likewise a worker cut off from the store (its renewals failing) past its lease: its
	// claim is taken over, its completion refused, and an effect it starts late is the
	// documented window of a holder that was not dead after all (a partition).
	if !j.completed(next) && j.unstored(next) && slices.ContainsFunc(j.h.Cuts, func(c Cut) bool {
		return c.What == "store" && !c.At.After(next.At) && !c.At.Before(next.At.Add(-2*j.lease))
	}) {
		return "unstored"
	}
	if j.completed(prev) {
		return ""
	}
	if slices.ContainsFunc(j.kills[prev.Worker], func(t time.Time) bool {
		return !t.Before(prev.At.Add(-j.inFlight)) && !j.lastRenewal(t).After(next.At.Add(-j.lease/2))
	}) {
		return "crash"
	}
	if slices.ContainsFunc(j.pauses[prev.Worker], func(p Pause) bool {
		return p.To.Sub(p.From) >= j.lease && !p.To.Before(prev.At.Add(-j.inFlight)) && !j.lastRenewal(p.From).After(next.At.Add(-j.lease/2))
	}) {
		return "pause"
	}
	if j.unstored(prev) {
		return "unstored"
	}
	return ""
}

// nearby describes, for diagnosis, what the two workers logged and suffered around two
// executions of a fact, with times relative to the first.
func (j *judge) nearby(prev, next Effect) string {
	rel := func(t time.Time) string { return fmt.Sprintf("%+dms", t.Sub(prev.At).Milliseconds()) }
	from, to := prev.At.Add(-2*j.lease), next.At.Add(j.lease)
	var parts []string
	for _, w := range []string{prev.Worker, next.Worker} {
		for _, d := range j.deliveries[[2]string{prev.Fact, w}] {
			parts = append(parts, fmt.Sprintf("%s %s at %s (unstored %v, takeover %v)", w, d.Outcome, rel(d.At), d.Unstored, d.Takeover))
		}
		for _, k := range j.kills[w] {
			if !k.Before(from) && !k.After(to) {
				parts = append(parts, fmt.Sprintf("%s killed at %s", w, rel(k)))
			}
		}
		for _, p := range j.pauses[w] {
			if !p.To.Before(from) && !p.From.After(to) {
				parts = append(parts, fmt.Sprintf("%s stopped from %s to %s", w, rel(p.From), rel(p.To)))
			}
		}
		if w == next.Worker {
			break
		}
	}
	for _, c := range j.h.Cuts {
		if !c.At.Before(from) && !c.At.After(to) {
			parts = append(parts, fmt.Sprintf("%s cut at %s", c.What, rel(c.At)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, "; ") + "]"
}

// Judge computes the verdict of h.
func Judge(h History) Verdict {
	j := &judge{h: h, lease: cmp.Or(h.Lease, 2*time.Second), inFlight: cmp.Or(h.InFlight, 2*time.Second),
		deliveries: map[[2]string][]Delivery{}, kills: map[string][]time.Time{}, pauses: map[string][]Pause{}}
	v := Verdict{Mode: h.Mode, Facts: len(h.Facts), Messages: h.Messages, Effects: len(h.Effects), Undrained: h.Undrained,
		Outcomes: map[string]int{}, Kills: map[string]int{}, Cuts: map[string]int{}}
	if h.Undrained > 0 {
		v.example("%d messages left on the broker once the consumers had stopped", h.Undrained)
	}
	for _, d := range h.Deliveries {
		j.deliveries[[2]string{d.Fact, d.Worker}] = append(j.deliveries[[2]string{d.Fact, d.Worker}], d)
		v.Outcomes[d.Outcome]++
		if d.Outcome == "rejected" {
			v.Rejected++
			v.example("%s dead-lettered by %s at %s", d.Fact, d.Worker, d.At.Format(time.RFC3339Nano))
		}
		if d.Unstored {
			v.UnstoredLogged++
		}
	}
	for _, k := range h.Kills {
		j.kills[k.Worker] = append(j.kills[k.Worker], k.At)
		v.Kills[k.Where]++
	}
	for _, p := range h.Pauses {
		j.pauses[p.Worker] = append(j.pauses[p.Worker], p)
		if p.To.Sub(p.From) >= j.lease {
			v.Pauses++
		}
	}
	for _, c := range h.Cuts {
		v.Cuts[c.What]++
	}
	published := map[string]bool{}
	for _, f := range h.Facts {
		published[f] = true
	}
	byFact := map[string][]Effect{}
	j.byFact = byFact
	for _, e := range h.Effects {
		if !published[e.Fact] {
			v.Phantoms++
			v.example("effect of %s, never published, by %s", e.Fact, e.Worker)
			continue
		}
		byFact[e.Fact] = append(byFact[e.Fact], e)
	}
	for _, f := range slices.Sorted(maps.Keys(published)) {
		es := byFact[f]
		if len(es) == 0 {
			v.Lost++
			v.example("%s lost: published, never executed", f)
			continue
		}
		sort.SliceStable(es, func(a, b int) bool { return es[a].At.Before(es[b].At) })
		for i := 1; i < len(es); i++ {
			prev, next := es[i-1], es[i]
			switch j.explain(prev, next) {
			case "crash":
				v.CrashTakeovers++
			case "pause":
				v.PauseTakeovers++
			case "unstored":
				v.UnstoredTakeovers++
			default:
				v.UnexplainedDoubles++
				if !slices.Contains(v.DoubledFacts, f) {
					v.DoubledFacts = append(v.DoubledFacts, f)
				}
				why := "no kill, pause past the lease or unstored completion of its holder explains it"
				switch {
				case h.Mode != Engine:
					why = "in transaction mode nothing does"
				case j.completed(prev):
					why = "the earlier execution's record had been completed"
				}
				v.example("%s executed again by %s at %s after %s at %s: %s%s", f, next.Worker, next.At.Format(time.RFC3339Nano),
					prev.Worker, prev.At.Format(time.RFC3339Nano), why, j.nearby(prev, next))
			}
		}
	}
	return v
}

func counts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Report writes the verdict as a table.
func (v Verdict) Report(w io.Writer) {
	verdict := "PASS"
	if !v.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "verdict (%s mode): %s\n", v.Mode, verdict)
	fmt.Fprintf(w, "  effects executed more than once, unexplained  %d (must be 0)\n", v.UnexplainedDoubles)
	fmt.Fprintf(w, "  facts published and never executed (lost)    %d (must be 0)\n", v.Lost)
	fmt.Fprintf(w, "  effects of facts never published             %d (must be 0)\n", v.Phantoms)
	fmt.Fprintf(w, "  deliveries dead-lettered                      %d (must be 0)\n", v.Rejected)
	fmt.Fprintf(w, "  messages left on the broker at the end        %d (must be 0)\n", v.Undrained)
	fmt.Fprintf(w, "documented windows (engine mode only; each for an execution never completed):\n")
	fmt.Fprintf(w, "  re-executions after a worker kill -9          %d\n", v.CrashTakeovers)
	fmt.Fprintf(w, "  re-executions after a pause past the lease    %d\n", v.PauseTakeovers)
	fmt.Fprintf(w, "  re-executions around an unstored completion   %d\n", v.UnstoredTakeovers)
	fmt.Fprintf(w, "run:\n")
	fmt.Fprintf(w, "  facts %d, messages published %d, effects recorded %d\n", v.Facts, v.Messages, v.Effects)
	fmt.Fprintf(w, "  deliveries: %s; completions not stored %d\n", counts(v.Outcomes), v.UnstoredLogged)
	fmt.Fprintf(w, "  kills: %s; pauses past the lease %d; relay cuts: %s\n", counts(v.Kills), v.Pauses, counts(v.Cuts))
	if len(v.Examples) > 0 {
		fmt.Fprintf(w, "violations (first %d):\n", len(v.Examples))
		for _, e := range v.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}
