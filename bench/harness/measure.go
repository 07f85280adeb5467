package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/bench/load"
)

// kase is one thing measured: a load against a URL, and the processes whose CPU time is
// charged to it.
type kase struct {
	name string
	opt  load.Options
	cpu  []*Proc // the processes whose CPU time is read: the proxy first, then the upstream
}

// figure is what the rounds of one case measured.
type figure struct {
	name     string
	rates    []float64 // requests per second, one per round
	lat      load.Histogram
	requests int64
	errors   int64
	replayed int64
	firstErr string
	cpu      map[string]time.Duration // per process, over all rounds
	status   map[int]int64
}

func (f *figure) rate() float64 { return median(f.rates) }

// cpuPerReq returns the CPU time of the named process per request, in microseconds.
func (f *figure) cpuPerReq(proc string) float64 {
	if f.requests == 0 {
		return 0
	}
	return float64(f.cpu[proc].Microseconds()) / float64(f.requests)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratio returns the median over rounds of a's rate over b's rate in the same round: each
// round runs every case back to back, so a drift in the machine's load cancels out.
func ratio(a, b *figure) float64 {
	n := min(len(a.rates), len(b.rates))
	rs := make([]float64, 0, n)
	for i := range n {
		if b.rates[i] > 0 {
			rs = append(rs, a.rates[i]/b.rates[i])
		}
	}
	return median(rs)
}

// runOnce runs c's load once and adds what it measured to f.
func runOnce(ctx context.Context, c kase, f *figure, progress io.Writer) error {
	before := make([]time.Duration, len(c.cpu))
	for i, p := range c.cpu {
		if p.Exited() {
			return fmt.Errorf("harness: %s has exited; see its log %s:\n%s", p.Name, p.log, tail(p.log))
		}
		before[i], _ = p.CPU()
	}
	res, err := load.Run(ctx, c.opt)
	if err != nil {
		return fmt.Errorf("harness: %s: %w", c.name, err)
	}
	for i, p := range c.cpu {
		after, _ := p.CPU()
		f.cpu[p.Name] += after - before[i]
	}
	f.rates = append(f.rates, res.Throughput())
	f.lat.Merge(&res.Latency)
	f.requests += res.Requests
	f.errors += res.Errors
	f.replayed += res.Replayed
	for s, n := range res.Status {
		f.status[s] += n
	}
	if f.firstErr == "" {
		f.firstErr = res.FirstError
	}
	fmt.Fprintf(progress, "  %-40s %s\n", c.name, res)
	return nil
}

// Machine describes the machine and its load right now, in one Markdown paragraph.
func Machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimLeft(name, " \t:"))
				break
			}
		}
	}
	loadavg := "?"
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			loadavg = strings.Join(f[:3], " ")
		}
	}
	kernel := "?"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	memGiB := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			memGiB = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d CPUs (nproc) · %s · %s RAM · Linux %s · %s %s/%s · load average %s (1, 5, 15 min) at start",
		runtime.NumCPU(), model, memGiB, kernel, runtime.Version(), runtime.GOOS, runtime.GOARCH, loadavg)
}

func us(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**NOT met**"
}

func loadProcs() int { return runtime.GOMAXPROCS(0) }
