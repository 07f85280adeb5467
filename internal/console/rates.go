package console

import (
	"sync"
	"time"
)

// Rate groups: the outcomes an operator watches, each from the gateway's outcome counters.
var rateGroups = []struct {
	Name     string
	Outcomes []string
}{
	{"new", []string{"executed", "released", "uncertain", "oversize", "upstream_error"}},
	{"replay", []string{"replay"}},
	{"409", []string{"in_flight"}},
	{"422", []string{"mismatch"}},
	{"503", []string{"store_error", "overloaded"}},
}

// sample is the cumulative count of each rate group at one instant.
type sample struct {
	at     time.Time
	counts []float64
}

// sampler reads the gateway's counters every step and keeps the last window of samples.
type sampler struct {
	read func() map[string]float64
	step time.Duration
	keep int

	mu      sync.Mutex
	samples []sample // oldest first, at most keep+1

	stop chan struct{}
	done chan struct{}
}

func newSampler(read func() map[string]float64, step, window time.Duration) *sampler {
	s := &sampler{read: read, step: step, keep: int(window / step), stop: make(chan struct{}), done: make(chan struct{})}
	s.take(time.Now())
	go s.run()
	return s
}

func (s *sampler) run() {
	defer close(s.done)
	t := time.NewTicker(s.step)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.take(now)
		}
	}
}

func (s *sampler) take(now time.Time) {
	m := s.read()
	counts := make([]float64, len(rateGroups))
	for i, g := range rateGroups {
		for _, o := range g.Outcomes {
			counts[i] += m[o]
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, sample{at: now, counts: counts})
	if len(s.samples) > s.keep+1 {
		s.samples = append(s.samples[:0], s.samples[len(s.samples)-s.keep-1:]...)
	}
}

func (s *sampler) close() {
	close(s.stop)
	<-s.done
}

// ratesJSON is what /api/rates answers: per group, the requests per second over each step of
// the window, oldest first, and over the last step.
type ratesJSON struct {
	Enabled bool                 `json:"enabled"`
	Step    float64              `json:"step_seconds"`
	Groups  []string             `json:"groups"`
	Times   []int64              `json:"times"` // Unix seconds, the end of each step
	Series  map[string][]float64 `json:"series"`
	Now     map[string]float64   `json:"now"`
}

// rates returns the rates over the kept samples.
func (s *sampler) rates() ratesJSON {
	s.mu.Lock()
	samples := append([]sample(nil), s.samples...)
	s.mu.Unlock()
	out := ratesJSON{Enabled: true, Step: s.step.Seconds(), Series: map[string][]float64{}, Now: map[string]float64{}}
	for _, g := range rateGroups {
		out.Groups = append(out.Groups, g.Name)
		out.Series[g.Name] = []float64{}
		out.Now[g.Name] = 0
	}
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		dt := b.at.Sub(a.at).Seconds()
		if dt <= 0 {
			continue
		}
		out.Times = append(out.Times, b.at.Unix())
		for j, g := range rateGroups {
			r := max(b.counts[j]-a.counts[j], 0) / dt
			out.Series[g.Name] = append(out.Series[g.Name], r)
			out.Now[g.Name] = r
		}
	}
	return out
}
