package idemotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/idemkit/idem"
)

// Attribute keys set on spans and metrics.
const (
	// AttrKey is the client's idempotency key (never the tenant's scope; see Options.Key).
	AttrKey = attribute.Key("idem.key")
	// AttrOutcome is how a stage ended: new, replay, in_flight, mismatch, canceled, kept,
	// released, uncertain, lease_lost, store_error, panic or ok (see idem.Outcome).
	AttrOutcome = attribute.Key("idem.outcome")
	// AttrStore is the kind of store (Options.Store).
	AttrStore = attribute.Key("idem.store")
	// AttrAttempt is the claim's attempt count (1, then +1 per takeover), or on a client
	// span the attempt's number.
	AttrAttempt = attribute.Key("idem.attempt")
	// AttrLeaseMS is the lease of a claim, in milliseconds.
	AttrLeaseMS = attribute.Key("idem.lease_ms")
	// AttrTakeover is true on a claim that took over from a holder whose lease had expired.
	AttrTakeover = attribute.Key("idem.takeover")
	// AttrCached is true on a replay served from the engine's local cache.
	AttrCached = attribute.Key("idem.cached")
	// AttrStage names the engine stage on metrics: claim, wait, effect, complete, release.
	AttrStage = attribute.Key("idem.stage")
)

// Observer returns an idem.Observer that traces and measures an Engine: set it as
// idem.Options.Observer. See the package documentation for its spans and metrics. It fails
// only if a metric instrument cannot be made.
func Observer(opt Options) (idem.Observer, error) {
	if opt.Key == nil {
		opt.Key = ClientKey
	}
	m := opt.meter()
	o := &observer{opt: opt, tracer: opt.tracer()}
	var errs [6]error
	o.outcomes, errs[0] = m.Int64Counter("idem.outcomes",
		metric.WithDescription("Engine stages ended, by stage and outcome."))
	o.latency, errs[1] = m.Float64Histogram("idem.store.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(StoreDurationBounds...),
		metric.WithDescription("Duration of the claim (reservation, including any wait), complete and release store calls."))
	o.cacheHits, errs[2] = m.Int64Counter("idem.cache.hits",
		metric.WithDescription("Claims answered from the engine's local cache, without a store call."))
	o.takeovers, errs[3] = m.Int64Counter("idem.takeovers",
		metric.WithDescription("Claims taken over from a holder whose lease had expired."))
	o.uncertain, errs[4] = m.Int64Counter("idem.uncertain",
		metric.WithDescription("Effects whose outcome was uncertain, their key held."))
	o.inFlight, errs[5] = m.Int64UpDownCounter("idem.claims.in_flight",
		metric.WithDescription("Effects running under a claim now."))
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("idemotel: %w", err)
		}
	}
	// Attribute sets are made once: a measurement then costs no allocation for them.
	var store []attribute.KeyValue
	if opt.Store != "" {
		store = []attribute.KeyValue{AttrStore.String(opt.Store)}
	}
	o.store = measure(metric.WithAttributeSet(attribute.NewSet(store...)))
	o.byOutcome = make(map[stageOutcome]measurement)
	for stage := idem.StageClaim; stage <= idem.StageRelease; stage++ {
		for _, out := range outcomes {
			o.byOutcome[stageOutcome{stage, out}] = measure(metric.WithAttributeSet(attribute.NewSet(append(store,
				AttrStage.String(stage.String()), AttrOutcome.String(string(out)))...)))
		}
	}
	// With the no-op provider the observer makes no span: starting one would only allocate a
	// context to carry nothing.
	if _, ok := opt.TracerProvider.(tracenoop.TracerProvider); ok {
		o.tracer = nil
	}
	return o, nil
}

var outcomes = []idem.Outcome{
	idem.OutcomeNew, idem.OutcomeReplay, idem.OutcomeInFlight, idem.OutcomeMismatch,
	idem.OutcomeCanceled, idem.OutcomeKept, idem.OutcomeReleased, idem.OutcomeUncertain,
	idem.OutcomeLeaseLost, idem.OutcomeStoreError, idem.OutcomePanic, idem.OutcomeOK,
}

type stageOutcome struct {
	stage   idem.Stage
	outcome idem.Outcome
}

// measurement is the options of a measurement with one attribute set, made once: passed as
// add... or rec..., they cost no allocation.
type measurement struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

func measure(o metric.MeasurementOption) measurement {
	return measurement{add: []metric.AddOption{o}, rec: []metric.RecordOption{o}}
}

// attrs returns the measurement options for a stage's outcome.
func (o *observer) attrs(ev idem.Event) measurement {
	if m, ok := o.byOutcome[stageOutcome{ev.Stage, ev.Outcome}]; ok {
		return m
	}
	return measure(metric.WithAttributes(append(o.storeAttr(),
		AttrStage.String(ev.Stage.String()), AttrOutcome.String(string(ev.Outcome)))...))
}

type observer struct {
	opt       Options
	tracer    trace.Tracer
	outcomes  metric.Int64Counter
	latency   metric.Float64Histogram
	cacheHits metric.Int64Counter
	takeovers metric.Int64Counter
	uncertain metric.Int64Counter
	inFlight  metric.Int64UpDownCounter

	store     measurement // idem.store
	byOutcome map[stageOutcome]measurement
}

var spanNames = [...]string{
	idem.StageClaim:    "idem.claim",
	idem.StageWait:     "idem.wait",
	idem.StageEffect:   "idem.effect",
	idem.StageComplete: "idem.complete",
	idem.StageRelease:  "idem.release",
}

func spanName(s idem.Stage) string {
	if int(s) < len(spanNames) && spanNames[s] != "" {
		return spanNames[s]
	}
	return "idem." + s.String()
}

func (o *observer) storeAttr() []attribute.KeyValue {
	if o.opt.Store == "" {
		return nil
	}
	return []attribute.KeyValue{AttrStore.String(o.opt.Store)}
}

// Begin starts the stage's span, and counts an effect under way.
func (o *observer) Begin(ctx context.Context, stage idem.Stage, key string) context.Context {
	if o.tracer == nil {
		if stage == idem.StageEffect {
			o.inFlight.Add(ctx, 1, o.store.add...)
		}
		return ctx
	}
	ctx, span := o.tracer.Start(ctx, spanName(stage))
	if span.IsRecording() {
		if o.opt.Store != "" {
			span.SetAttributes(AttrStore.String(o.opt.Store))
		}
		if k := o.opt.Key(key); k != "" {
			span.SetAttributes(AttrKey.String(k))
		}
	}
	if stage == idem.StageEffect {
		o.inFlight.Add(ctx, 1, o.store.add...)
	}
	return ctx
}

// End ends the stage's span with its outcome and records the metrics. Error messages are not
// put on spans: they may quote the storage key, scope included.
func (o *observer) End(ctx context.Context, ev idem.Event) {
	if o.tracer != nil {
		span := trace.SpanFromContext(ctx)
		if span.IsRecording() {
			setOutcome(span, ev)
		}
		span.End()
	}
	m := o.attrs(ev)
	o.outcomes.Add(ctx, 1, m.add...)
	switch ev.Stage {
	case idem.StageClaim:
		if ev.Cached {
			o.cacheHits.Add(ctx, 1, o.store.add...)
			break
		}
		o.latency.Record(ctx, ev.Duration.Seconds(), m.rec...)
		if ev.Takeover {
			o.takeovers.Add(ctx, 1, o.store.add...)
		}
	case idem.StageComplete, idem.StageRelease:
		o.latency.Record(ctx, ev.Duration.Seconds(), m.rec...)
	case idem.StageEffect:
		o.inFlight.Add(ctx, -1, o.store.add...)
		if ev.Outcome == idem.OutcomeUncertain {
			o.uncertain.Add(ctx, 1, o.store.add...)
		}
	}
}

// setOutcome sets the span's attributes for how its stage ended.
func setOutcome(span trace.Span, ev idem.Event) {
	span.SetAttributes(AttrOutcome.String(string(ev.Outcome)))
	if ev.Attempt > 0 {
		span.SetAttributes(AttrAttempt.Int(ev.Attempt), AttrLeaseMS.Int64(ev.Lease.Milliseconds()))
	}
	if ev.Takeover {
		span.SetAttributes(AttrTakeover.Bool(true))
		if ev.Stage == idem.StageClaim {
			span.AddEvent("idem.takeover", trace.WithAttributes(AttrAttempt.Int(ev.Attempt)))
		}
	}
	if ev.Cached {
		span.SetAttributes(AttrCached.Bool(true))
	}
	if ev.Stage == idem.StageClaim && ev.Outcome == idem.OutcomeReplay {
		span.SetName("idem.replay")
	}
	switch ev.Outcome {
	case idem.OutcomeStoreError, idem.OutcomeLeaseLost, idem.OutcomePanic, idem.OutcomeUncertain:
		span.SetStatus(codes.Error, string(ev.Outcome))
	}
}
