package gateway

import (
	"context"
	"errors"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/storehook"
	"github.com/idemkit/idem/store/sweeper"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gateway's Prometheus metrics. Register them on an injected Registerer.
type Metrics struct {
	// Requests counts processed requests by outcome: each idemhttp.Outcome (executed,
	// replay, in_flight, mismatch, bypass, oversize, overloaded, store_error, invalid_key,
	// invalid_scope, invalid_body, missing_key, ...), upstream_error, and refused (an
	// ambiguous path, a method in the wrong case, an identity header named in Connection).
	// Every outcome's series is exported from the start, at 0.
	Requests *prometheus.CounterVec
	// StoreSeconds is the latency of store operations, by operation and result: ok, error (the
	// store failed), lease_lost (a completion, release or extension refused because the claim
	// was taken over: idem.ErrLeaseLost), not_found (a get or release of a key with no record:
	// idem.ErrNotFound).
	StoreSeconds *prometheus.HistogramVec
	// InFlight is the number of requests being proxied now.
	InFlight prometheus.Gauge
	// ClaimsInFlight is the number of claims held by a request being executed now: processed
	// requests whose upstream call (and the recording of its answer) is under way. Bypassed
	// requests, replays and duplicates refused with 409 are not counted.
	ClaimsInFlight prometheus.Gauge
	// UpstreamSeconds is the latency of upstream calls, by result (ok, error).
	UpstreamSeconds *prometheus.HistogramVec
	// BuildInfo is idem_build_info{version,commit,go_version}, always 1: the running build,
	// for joins in queries and for spotting a fleet that runs mixed versions.
	BuildInfo *prometheus.GaugeVec
	// SweepBacklog is the estimated number of expired records the background sweeper has yet
	// to delete: counted as each run begins (by the SQL stores), less what the run deleted
	// since, and 0 once a run caught up.
	SweepBacklog prometheus.Gauge
	// SweepDeleted counts the expired records the sweeper deleted.
	SweepDeleted prometheus.Counter
	// SweepRate is the records per second the sweeper's current (or last) run deletes, its
	// pauses included.
	SweepRate prometheus.Gauge
	// SweepBatchSeconds is the latency of each sweep statement (one batch).
	SweepBatchSeconds prometheus.Histogram
	// SweepRuns counts the sweeper's runs by result: caught_up (nothing expired was left),
	// behind (it stopped after its most batches, and goes on after a pause), error.
	SweepRuns *prometheus.CounterVec

	// Pre-resolved children, so a request looks up no label: every outcome's counter (each
	// series is exported from the start, at 0) and the upstream observers.
	outcomes   map[string]prometheus.Counter
	upstreamOK prometheus.Observer
	upstreamKO prometheus.Observer
}

// outcomeUpstreamError labels a request whose upstream call failed (nothing sent, or sent
// without an answer).
const outcomeUpstreamError = "upstream_error"

// requestOutcomes are the label values of Requests: the middleware's outcomes and
// upstream_error.
var requestOutcomes = []idemhttp.Outcome{
	idemhttp.OutcomeExecuted, idemhttp.OutcomeReleased, idemhttp.OutcomeUncertain, idemhttp.OutcomeOversize,
	idemhttp.OutcomeReplay, idemhttp.OutcomeInFlight, idemhttp.OutcomeMismatch, idemhttp.OutcomeBypass,
	idemhttp.OutcomeFailOpen, idemhttp.OutcomeStoreError, idemhttp.OutcomeOverloaded, idemhttp.OutcomeInvalidKey,
	idemhttp.OutcomeInvalidScope, idemhttp.OutcomeInvalidBody, idemhttp.OutcomeMissingKey,
	idemhttp.OutcomeTooLarge, idemhttp.OutcomeError, outcomeUpstreamError, outcomeRefused,
}

// buildInfo returns the labels of idem_build_info: the main module's version (or version, if
// set), its VCS revision and the Go version, "unknown" where the binary does not say.
func buildInfo(version string) (v, commit, goVersion string) {
	v, commit, goVersion = version, "", runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
	}
	if v == "" {
		v = "unknown"
	}
	if commit == "" {
		commit = "unknown"
	}
	return v, commit, goVersion
}

// request counts one request with the outcome.
func (m *Metrics) request(outcome idemhttp.Outcome) {
	if c, ok := m.outcomes[string(outcome)]; ok {
		c.Inc()
		return
	}
	m.Requests.WithLabelValues(string(outcome)).Inc() // an outcome added to idemhttp later
}

// upstream observes one upstream call.
func (m *Metrics) upstream(took time.Duration, failed bool) {
	if failed {
		m.upstreamKO.Observe(took.Seconds())
		return
	}
	m.upstreamOK.Observe(took.Seconds())
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered).
// idem_build_info's version label is taken from the binary's module information.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) { return newMetrics(reg, "") }

func newMetrics(reg prometheus.Registerer, version string) (*Metrics, error) {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "idem", Name: "requests_total", Help: "Requests processed by the gateway, by outcome.",
		}, []string{"outcome"}),
		StoreSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "idem", Name: "store_operation_seconds", Help: "Latency of store operations.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"op", "result"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "idem", Name: "requests_in_flight", Help: "Requests being proxied now.",
		}),
		ClaimsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "idem", Name: "claims_in_flight", Help: "Claims held by a request being executed now.",
		}),
		UpstreamSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "idem", Name: "upstream_seconds", Help: "Latency of upstream calls.",
			Buckets: prometheus.DefBuckets,
		}, []string{"result"}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "idem", Name: "build_info", Help: "The running build: version, VCS commit and Go version; always 1.",
		}, []string{"version", "commit", "go_version"}),
		SweepBacklog: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "idem", Name: "sweep_backlog_records", Help: "Estimated expired records the sweeper has yet to delete.",
		}),
		SweepDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "idem", Name: "sweep_deleted_records_total", Help: "Expired records the sweeper deleted.",
		}),
		SweepRate: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "idem", Name: "sweep_records_per_second", Help: "Records per second the sweeper's current or last run deletes, pauses included.",
		}),
		SweepBatchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "idem", Name: "sweep_batch_seconds", Help: "Latency of each sweep statement (one batch).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		SweepRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "idem", Name: "sweep_runs_total", Help: "Sweeper runs, by result: caught_up, behind or error.",
		}, []string{"result"}),
	}
	for _, r := range []sweeper.Outcome{sweeper.OutcomeCaughtUp, sweeper.OutcomeBehind, sweeper.OutcomeError} {
		m.SweepRuns.WithLabelValues(string(r))
	}
	m.BuildInfo.WithLabelValues(buildInfo(version)).Set(1)
	m.outcomes = make(map[string]prometheus.Counter, len(requestOutcomes))
	for _, o := range requestOutcomes {
		m.outcomes[string(o)] = m.Requests.WithLabelValues(string(o))
	}
	m.upstreamOK, m.upstreamKO = m.UpstreamSeconds.WithLabelValues("ok"), m.UpstreamSeconds.WithLabelValues("error")
	if reg != nil {
		for _, c := range []prometheus.Collector{m.Requests, m.StoreSeconds, m.InFlight, m.ClaimsInFlight, m.UpstreamSeconds, m.BuildInfo,
			m.SweepBacklog, m.SweepDeleted, m.SweepRate, m.SweepBatchSeconds, m.SweepRuns} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// The result labels of StoreSeconds, indexed by storeResult.
var storeResults = [...]string{"ok", "error", "lease_lost", "not_found"}

// storeResult is the index in storeResults of a store operation's result: a claim refused
// by the fence (idem.ErrLeaseLost) is not a success, nor is it the store failing.
func storeResult(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, idem.ErrLeaseLost):
		return 2
	case errors.Is(err, idem.ErrNotFound):
		return 3
	}
	return 1
}

// instrument wraps a store so that h times each of its operations, by result.
func instrument(st idem.Store, h *prometheus.HistogramVec) idem.Store {
	// Pre-resolved observers: no label lookup on the request path.
	var obs [storehook.NumOps][len(storeResults)]prometheus.Observer
	for op := range storehook.NumOps {
		for i, r := range storeResults {
			obs[op][i] = h.WithLabelValues(op.String(), r)
		}
	}
	return storehook.Wrap(st, storehook.Hooks{After: func(op storehook.Op, start time.Time, err error) {
		obs[op][storeResult(err)].Observe(time.Since(start).Seconds())
	}})
}

// claimObserver counts the engines' effects in ClaimsInFlight, and passes every stage on to
// next (nil: none).
type claimObserver struct {
	next   idem.Observer
	claims prometheus.Gauge
	clock  *claimClock // when each claim began, for idem_claims_overdue (nil: not tracked)
}

func (o claimObserver) Begin(ctx context.Context, stage idem.Stage, key string) context.Context {
	if stage == idem.StageEffect {
		o.claims.Inc()
		if o.clock != nil {
			ctx = o.clock.begin(ctx)
		}
	}
	if o.next != nil {
		return o.next.Begin(ctx, stage, key)
	}
	return ctx
}

func (o claimObserver) End(ctx context.Context, ev idem.Event) {
	if ev.Stage == idem.StageEffect {
		o.claims.Dec()
		if o.clock != nil {
			o.clock.end(ctx)
		}
	}
	if o.next != nil {
		o.next.End(ctx, ev)
	}
}

// ObserveSweep records a Sweeper's batches and runs in the idem_sweep_* metrics: give it to
// sweeper.Options.OnEvent.
func (m *Metrics) ObserveSweep(ev sweeper.Event) {
	switch ev.Kind {
	case sweeper.EventBatch:
		b := ev.Batch
		m.SweepBatchSeconds.Observe(b.Took.Seconds())
		m.SweepDeleted.Add(float64(b.Deleted))
		m.SweepRate.Set(b.Rate)
		if b.Backlog >= 0 {
			m.SweepBacklog.Set(float64(b.Backlog))
		}
	case sweeper.EventRun:
		r := ev.Run
		m.SweepRuns.WithLabelValues(string(ev.Outcome)).Inc()
		m.SweepRate.Set(r.Rate())
		if r.Backlog >= 0 {
			m.SweepBacklog.Set(float64(r.Backlog))
		}
	}
}
