package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
	"github.com/prometheus/client_golang/prometheus"
)

// claimClock tracks when each claim this gateway holds began executing, so that the claims
// held far longer than any call may take can be counted: idem_claims_overdue.
//
// A claim's upstream call is bounded by the upstream timeout, and recording its answer takes
// far less than a lease. A claim still in flight after UpstreamTimeout + Lease is stuck (a
// hung connection, a store that takes the completion and never answers): while its holder
// renews its lease, every retry of its key gets 409 and no other gateway takes it over.
//
// The claims are the drainer's table of calls, where a request registers once: the clock
// notes on the request's upstreamOutcome when its effect began, and counts from the table.
type claimClock struct {
	overdueAfter time.Duration
	now          func() time.Time
	calls        *drainer
}

func newClaimClock(overdueAfter time.Duration, calls *drainer) *claimClock {
	return &claimClock{overdueAfter: overdueAfter, now: time.Now, calls: calls}
}

// begin records the start of the claim of the request whose context is ctx, and returns ctx.
func (c *claimClock) begin(ctx context.Context) context.Context {
	if o, ok := ctx.Value(outcomeKey{}).(*upstreamOutcome); ok {
		c.calls.effectBegan(o, c.now())
	}
	return ctx
}

// end notes that the claim begin recorded has finished.
func (c *claimClock) end(ctx context.Context) {
	if o, ok := ctx.Value(outcomeKey{}).(*upstreamOutcome); ok {
		o.effectAt.Store(0)
	}
}

// overdue counts the claims in flight for longer than overdueAfter.
func (c *claimClock) overdue() float64 {
	return float64(c.calls.effectsBefore(c.now().Add(-c.overdueAfter)))
}

// heldCount is the most in-progress records one count of held keys reads: ten pages.
const heldCount = 10 * idem.MaxListLimit

// heldCollector exports idem_keys_held, the records of the store held after an uncertain
// outcome (Config.Uncertain hold) and waiting for `idem release` or their expiry, as `idem
// list --state held` finds them, and idem_keys_held_counted_timestamp_seconds, when that
// count last succeeded.
//
// The count runs when Prometheus scrapes, never on the request path, at most once per
// interval (a scrape in between gets the last count), and lists only in-progress records,
// at most heldCount of them: beyond that the gauge is a lower bound, and
// idem_keys_held_count_truncated is 1.
type heldCollector struct {
	lister   idem.Lister
	interval time.Duration
	timeout  time.Duration
	now      func() time.Time

	held, counted, truncated *prometheus.Desc

	mu        sync.Mutex
	last      time.Time // when the last count began (zero: never)
	ok        bool      // a count has succeeded
	n         int
	at        time.Time // when the last successful count ran
	truncPage bool
}

func newHeldCollector(l idem.Lister, interval time.Duration) *heldCollector {
	return &heldCollector{
		lister: l, interval: interval, timeout: 5 * time.Second, now: time.Now,
		held: prometheus.NewDesc("idem_keys_held",
			"Records held after an uncertain outcome, waiting for idem release or their expiry (counted through the store at most once per interval).", nil, nil),
		counted: prometheus.NewDesc("idem_keys_held_counted_timestamp_seconds",
			"When idem_keys_held was last counted successfully (Unix time).", nil, nil),
		truncated: prometheus.NewDesc("idem_keys_held_count_truncated",
			"1 if the last count of held keys stopped at its bound of in-progress records, so idem_keys_held is a lower bound.", nil, nil),
	}
}

func (h *heldCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- h.held
	ch <- h.counted
	ch <- h.truncated
}

func (h *heldCollector) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := h.now(); h.last.IsZero() || now.Sub(h.last) >= h.interval {
		h.last = now
		ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
		n, trunc, err := countHeld(ctx, h.lister, now)
		cancel()
		if err == nil {
			h.ok, h.n, h.at, h.truncPage = true, n, now, trunc
		}
	}
	if !h.ok {
		return // nothing true to say yet; the timestamp's absence shows it
	}
	ch <- prometheus.MustNewConstMetric(h.held, prometheus.GaugeValue, float64(h.n))
	ch <- prometheus.MustNewConstMetric(h.counted, prometheus.GaugeValue, float64(h.at.UnixNano())/1e9)
	trunc := 0.0
	if h.truncPage {
		trunc = 1
	}
	ch <- prometheus.MustNewConstMetric(h.truncated, prometheus.GaugeValue, trunc)
}

// countHeld counts the held records among the store's in-progress records at now, reading at
// most heldCount of them; truncated reports that it stopped there.
func countHeld(ctx context.Context, l idem.Lister, now time.Time) (n int, truncated bool, err error) {
	q := idem.ListQuery{State: idem.StateInProgress, Limit: idem.MaxListLimit}
	for read := 0; ; {
		page, err := l.List(ctx, q)
		if err != nil {
			return 0, false, err
		}
		for _, rec := range page.Records {
			if console.ConditionOf(rec, now) == console.Held {
				n++
			}
		}
		read += len(page.Records)
		if page.Next == "" {
			return n, false, nil
		}
		if read >= heldCount {
			return n, true, nil
		}
		q.Cursor = page.Next
	}
}

// registerClaimGauges registers idem_claims_overdue (claims this gateway holds in flight for
// longer than the upstream timeout and a lease) and, if the store can list its records, the
// count of held keys, on reg.
func (g *Gateway) registerClaimGauges(reg prometheus.Registerer) error {
	g.claims = newClaimClock(time.Duration(g.cfg.UpstreamTimeout)+time.Duration(g.cfg.Lease), g.drain)
	overdue := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "idem", Name: "claims_overdue",
		Help: "Claims this gateway holds in flight for longer than its upstream timeout plus its lease: stuck, their keys answer 409.",
	}, g.claims.overdue)
	if err := reg.Register(overdue); err != nil {
		return err
	}
	if l, ok := g.store.(idem.Lister); ok {
		g.held = newHeldCollector(l, time.Minute)
		return reg.Register(g.held)
	}
	return nil
}
