package idem

import (
	"context"
	"time"
)

// Observer watches what an Engine does, for tracing and metrics. Set it in Options.Observer;
// when it is nil the engine pays one nil check per stage and nothing else.
//
// Every stage is announced by a call to Begin and closed by exactly one call to End with the
// context Begin returned, so a tracer can start a span in Begin, put it in the returned
// context and end it in End, and a metrics collector can count in End (and track what is
// under way between the two). Stages nest: Wait runs inside Claim; Complete and Release run
// inside Effect; the effect function receives the context Begin returned for StageEffect, so
// its own spans are children of the effect's.
//
// Begin and End are called from the goroutine that called Engine.Do, synchronously: they
// must be quick and safe for concurrent use by many goroutines. They must not call the
// engine. The key they receive is the storage key, which may carry a tenant's scope in front
// of the client's key: an observer that exports it must strip what it must not show.
type Observer interface {
	// Begin is called when stage starts for key. It returns the context the stage runs
	// with; return ctx itself when there is nothing to attach.
	Begin(ctx context.Context, stage Stage, key string) context.Context
	// End is called when the stage ends, with the context Begin returned.
	End(ctx context.Context, ev Event)
}

// Stage names a step of Engine.Do.
type Stage uint8

const (
	// StageClaim looks up the key: a reservation in the store (or a hit in the local cache),
	// including any wait for another holder. It ends with OutcomeNew, OutcomeReplay,
	// OutcomeInFlight, OutcomeMismatch, OutcomeStoreError or OutcomeCanceled.
	StageClaim Stage = iota + 1
	// StageWait is a duplicate waiting for the holder of its key to finish (Options.Wait),
	// inside StageClaim. It ends with the claim's outcome.
	StageWait
	// StageEffect runs the effect under a claim and records its result. It ends with
	// OutcomeKept, OutcomeReleased, OutcomeUncertain, OutcomeLeaseLost, OutcomeStoreError
	// (the effect ran, its result could not be stored) or OutcomePanic.
	StageEffect
	// StageComplete is the store call (with its retries) that stores the effect's response.
	StageComplete
	// StageRelease is the store call that gives up a claim so that a retry runs.
	StageRelease
)

// String returns "claim", "wait", "effect", "complete", "release" or "unknown".
func (s Stage) String() string {
	switch s {
	case StageClaim:
		return "claim"
	case StageWait:
		return "wait"
	case StageEffect:
		return "effect"
	case StageComplete:
		return "complete"
	case StageRelease:
		return "release"
	}
	return "unknown"
}

// Outcome says how a stage ended. Its values are short, stable, lowercase words, fit to be
// metric labels.
type Outcome string

// Outcomes of StageClaim and StageWait.
const (
	// OutcomeNew: the key was claimed; the effect runs now (Event.Takeover when it was taken
	// over from a holder whose lease had expired).
	OutcomeNew Outcome = "new"
	// OutcomeReplay: the stored response is returned; the effect does not run.
	OutcomeReplay Outcome = "replay"
	// OutcomeInFlight: another holder runs the effect now (ErrInFlight).
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeMismatch: the key was used with another fingerprint (ErrMismatch).
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeCanceled: the caller's context ended before an answer.
	OutcomeCanceled Outcome = "canceled"
)

// Outcomes of StageEffect, StageComplete and StageRelease (OutcomeStoreError also ends a
// claim whose reservation failed).
const (
	// OutcomeKept: the effect's response is stored for replay.
	OutcomeKept Outcome = "kept"
	// OutcomeReleased: the claim was given up so that a retry runs the effect.
	OutcomeReleased Outcome = "released"
	// OutcomeUncertain: the effect may have happened; the claim is held per UncertainPolicy.
	OutcomeUncertain Outcome = "uncertain"
	// OutcomeLeaseLost: the claim was taken over; the result was not stored.
	OutcomeLeaseLost Outcome = "lease_lost"
	// OutcomeStoreError: the store could not answer.
	OutcomeStoreError Outcome = "store_error"
	// OutcomePanic: the effect panicked; the claim was released.
	OutcomePanic Outcome = "panic"
	// OutcomeOK: a store call (StageComplete, StageRelease) succeeded.
	OutcomeOK Outcome = "ok"
)

// Event describes a stage that ended.
type Event struct {
	// Stage is the stage that ended.
	Stage Stage
	// Key is the storage key (scope included; see Observer).
	Key string
	// Outcome says how it ended.
	Outcome Outcome
	// Duration is the time from Begin to End, by the wall clock.
	Duration time.Duration
	// Err is the error the stage ended with, if any.
	Err error
	// Cached is true for a StageClaim answered from the local cache, with no store call.
	Cached bool
	// Takeover is true for a StageClaim (and its StageEffect) that took over a claim whose
	// holder's lease had expired.
	Takeover bool
	// Attempt is the claim's attempt count (1 for the first claim, +1 for each takeover) on
	// StageClaim with OutcomeNew and on StageEffect; 0 otherwise.
	Attempt int
	// Lease is the lease the claim holds, on StageClaim with OutcomeNew and on StageEffect.
	Lease time.Duration
}

// observation is a stage under way; its zero value (no observer) does nothing.
type observation struct {
	o     Observer
	ctx   context.Context
	start time.Time
}

// observe begins stage for key in ob if the engine has an observer, and returns ctx for the
// stage. Without an observer it is one inlined nil check.
func (e *Engine) observe(ctx context.Context, stage Stage, key string, ob *observation) context.Context {
	if e.opt.Observer == nil {
		return ctx
	}
	return ob.begin(e.opt.Observer, ctx, stage, key)
}

func (ob *observation) begin(o Observer, ctx context.Context, stage Stage, key string) context.Context {
	ctx = o.Begin(ctx, stage, key)
	*ob = observation{o: o, ctx: ctx, start: time.Now()}
	return ctx
}

// end ends the stage with ev (Duration filled in). Without an observer it is one inlined nil
// check.
func (ob *observation) end(ev Event) {
	if ob.o != nil {
		ob.finish(ev)
	}
}

func (ob *observation) finish(ev Event) {
	ev.Duration = time.Since(ob.start)
	ob.o.End(ob.ctx, ev)
	ob.o = nil
}
