package gateway

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem/store/sweeper"
)

// TestObserveSweep: a sweeper's batches and runs show in the idem_sweep_* metrics, which are
// exported from the start.
func TestObserveSweep(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	series := func() map[string]string {
		w := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		out := map[string]string{}
		for _, l := range strings.Split(w.Body.String(), "\n") {
			if strings.HasPrefix(l, "idem_sweep_") {
				i := strings.LastIndexByte(l, ' ')
				out[l[:i]] = l[i+1:]
			}
		}
		return out
	}
	before := series()
	for _, s := range []string{"idem_sweep_backlog_records", "idem_sweep_deleted_records_total", "idem_sweep_records_per_second",
		"idem_sweep_batch_seconds_count", `idem_sweep_runs_total{result="caught_up"}`, `idem_sweep_runs_total{result="behind"}`,
		`idem_sweep_runs_total{result="error"}`} {
		if before[s] != "0" {
			t.Errorf("%s = %q before any sweep, want 0", s, before[s])
		}
	}
	batch := func(b sweeper.Batch) {
		m.ObserveSweep(sweeper.Event{Kind: sweeper.EventBatch, Outcome: sweeper.OutcomeOK, Batch: b})
	}
	run := func(o sweeper.Outcome, r sweeper.Run) {
		m.ObserveSweep(sweeper.Event{Kind: sweeper.EventRun, Outcome: o, Run: r})
	}
	batch(sweeper.Batch{Size: 1000, Deleted: 1000, Took: 20 * time.Millisecond, Backlog: 4000, Rate: 5000})
	batch(sweeper.Batch{Size: 1000, Deleted: 1000, Took: 30 * time.Millisecond, Backlog: 3000, Rate: 4000})
	if got := series()["idem_sweep_backlog_records"]; got != "3000" {
		t.Errorf("backlog %s, want 3000", got)
	}
	batch(sweeper.Batch{Size: 1000, Deleted: 10, Took: time.Millisecond, Backlog: -1, Rate: 3000})
	if got := series()["idem_sweep_backlog_records"]; got != "3000" {
		t.Errorf("backlog %s after a batch that does not know it, want 3000 kept", got)
	}
	run(sweeper.OutcomeCaughtUp, sweeper.Run{Deleted: 2010, Batches: 3, Took: time.Second, Backlog: 0, CaughtUp: true})
	run(sweeper.OutcomeBehind, sweeper.Run{Deleted: 100, Batches: 100, Took: time.Second, Backlog: -1})
	run(sweeper.OutcomeError, sweeper.Run{Err: errors.New("down"), Backlog: -1})
	got := series()
	for s, want := range map[string]string{
		`idem_sweep_runs_total{result="caught_up"}`: "1", `idem_sweep_runs_total{result="behind"}`: "1",
		`idem_sweep_runs_total{result="error"}`: "1", "idem_sweep_deleted_records_total": "2010",
		"idem_sweep_backlog_records": "0", "idem_sweep_batch_seconds_count": "3",
		`idem_sweep_batch_seconds_bucket{le="0.001"}`: "1", `idem_sweep_batch_seconds_bucket{le="0.025"}`: "2",
		"idem_sweep_records_per_second": "0", // the failed run deleted nothing
	} {
		if got[s] != want {
			t.Errorf("%s = %q, want %s", s, got[s], want)
		}
	}
}
