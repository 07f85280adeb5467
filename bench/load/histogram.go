package load

import (
	"math/bits"
	"time"
)

// Histogram counts latencies in log-linear buckets: exact below 256ns, then 128 buckets per
// power of two, so a quantile read from it is within 0.8% of the true value. It has a fixed
// size (about 36 KiB) whatever the number of samples, and the zero value is ready to use.
// It is not safe for concurrent use: give each goroutine its own and Merge them.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    time.Duration
}

const (
	histSub     = 128 // buckets per power of two
	histLinear  = 2 * histSub
	histMaxExp  = 40 // values are capped at 2^40 ns (about 18 minutes)
	histBuckets = histLinear + (histMaxExp-8)*histSub
)

func bucketOf(d time.Duration) int {
	v := uint64(max(d, 0))
	if v >= 1<<histMaxExp {
		v = 1<<histMaxExp - 1
	}
	if v < histLinear {
		return int(v)
	}
	shift := bits.Len64(v) - 8 // v>>shift is in [128, 255]
	return histLinear + (shift-1)*histSub + int(v>>shift) - histSub
}

// bucketValue returns the middle of bucket i.
func bucketValue(i int) time.Duration {
	if i < histLinear {
		return time.Duration(i)
	}
	shift := (i-histLinear)/histSub + 1
	m := uint64((i-histLinear)%histSub + histSub)
	return time.Duration(m<<shift + (1<<shift)/2)
}

// Record counts one latency. Negative values count as 0, values above 2^40ns as 2^40ns.
func (h *Histogram) Record(d time.Duration) {
	h.counts[bucketOf(d)]++
	h.n++
	h.max = max(h.max, d)
}

// Merge adds the counts of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// Count returns the number of latencies recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Max returns the largest latency recorded, exactly.
func (h *Histogram) Max() time.Duration { return h.max }

// Quantile returns the latency at or below which a fraction q (0 to 1) of the samples fall,
// within 0.8%, or 0 when the histogram is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(bucketValue(i), h.max)
		}
	}
	return h.max
}
