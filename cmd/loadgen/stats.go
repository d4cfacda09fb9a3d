package main

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// recorder collects every request's outcome. Samples are kept whole, not
// bucketed, so percentiles are exact; at 16 bytes a request that is 48 MB
// for ten minutes at 5,000 requests a second.
type recorder struct {
	// Counters read by the progress line while the run goes on.
	sent      atomic.Int64
	completed atomic.Int64
	failed    atomic.Int64

	mu           sync.Mutex
	ttft         []time.Duration
	e2e          []time.Duration
	outputTokens int64
	errors       map[string]int64
}

func newRecorder(expected int) *recorder {
	expected = min(max(expected, 0), 1<<20)
	return &recorder{
		ttft:   make([]time.Duration, 0, expected),
		e2e:    make([]time.Duration, 0, expected),
		errors: make(map[string]int64),
	}
}

// markSent counts a request handed to the HTTP client.
func (r *recorder) markSent() { r.sent.Add(1) }

// record stores the outcome of a sent request.
func (r *recorder) record(res result) {
	if res.kind != "" {
		r.fail(res.kind)
		return
	}
	r.mu.Lock()
	r.e2e = append(r.e2e, res.e2e)
	if res.hasTTFT {
		r.ttft = append(r.ttft, res.ttft)
	}
	r.outputTokens += int64(res.outputTokens)
	r.mu.Unlock()
	r.completed.Add(1)
}

// fail counts a request that did not complete, by kind.
func (r *recorder) fail(kind string) {
	r.mu.Lock()
	r.errors[kind]++
	r.mu.Unlock()
	r.failed.Add(1)
}

// summary is the outcome of a run, ready to report.
type summary struct {
	duration     time.Duration
	sent         int64
	completed    int64
	outputTokens int64
	errors       map[string]int64
	ttft         latencyQuantiles
	e2e          latencyQuantiles
}

type latencyQuantiles struct {
	p50, p90, p99 time.Duration
}

func (s summary) requestsPerSecond() float64 { return perSecond(s.completed, s.duration) }

func (s summary) outputTokensPerSecond() float64 { return perSecond(s.outputTokens, s.duration) }

func (s summary) errorCount() int64 {
	var n int64
	for _, c := range s.errors {
		n += c
	}
	return n
}

func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// summarize computes the summary of a run that lasted d. Call it once the
// run is over.
func (r *recorder) summarize(d time.Duration) summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summary{
		duration:     d,
		sent:         r.sent.Load(),
		completed:    r.completed.Load(),
		outputTokens: r.outputTokens,
		errors:       maps.Clone(r.errors),
		ttft:         quantilesOf(r.ttft),
		e2e:          quantilesOf(r.e2e),
	}
}

func quantilesOf(samples []time.Duration) latencyQuantiles {
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	return latencyQuantiles{
		p50: percentile(sorted, 0.50),
		p90: percentile(sorted, 0.90),
		p99: percentile(sorted, 0.99),
	}
}

// percentile returns the q-quantile (0 <= q <= 1) of sorted samples,
// interpolating linearly between the two nearest ranks (NumPy's default),
// or 0 when there are no samples.
func percentile(sorted []time.Duration, q float64) time.Duration {
	switch n := len(sorted); {
	case n == 0:
		return 0
	case q <= 0:
		return sorted[0]
	case q >= 1:
		return sorted[n-1]
	}
	pos := q * float64(len(sorted)-1)
	lo := int(pos)
	if lo+1 >= len(sorted) {
		return sorted[lo]
	}
	frac := pos - float64(lo)
	return sorted[lo] + time.Duration(frac*float64(sorted[lo+1]-sorted[lo]))
}
