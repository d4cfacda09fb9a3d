package main

import (
	"math"
	"slices"
	"time"

	"github.com/kvgate/kvgate/routing"
)

// fleetStats accumulates one policy's measurements as the run goes.
type fleetStats struct {
	ttft, e2e    []time.Duration // completed requests, in completion order
	completed    int
	rejected     int
	outputTokens int64
	cachedTokens int64 // from the requests' first-token events
	lastFinish   time.Duration
	maxWaiting   int
	decisions    map[routing.Label]int
	balance      runningBalance
	partitions   []partitionStats // by the workload's partition index
}

func newFleetStats(workers, requests, partitions int) *fleetStats {
	return &fleetStats{
		ttft:       make([]time.Duration, 0, requests),
		e2e:        make([]time.Duration, 0, requests),
		decisions:  map[routing.Label]int{},
		balance:    runningBalance{running: make([]int, workers)},
		partitions: make([]partitionStats, partitions),
	}
}

// partitionStats is one tenant's share of a run.
type partitionStats struct {
	ttft         []time.Duration // completed requests, from arrival (admission's wait included)
	servedTokens int64           // prompt and output tokens of completed requests
	rejected     int
}

func (p *partitionStats) completed(ttft time.Duration, servedTokens int) {
	p.ttft = append(p.ttft, ttft)
	p.servedTokens += int64(servedTokens)
}

// runningBalance integrates max/mean running requests across workers over
// virtual time, counting only the time when some request runs: an idle
// fleet is neither balanced nor imbalanced. 1 is perfect balance; the number
// of workers means one worker runs everything.
type runningBalance struct {
	running  []int
	sum, max int
	last     time.Duration
	weighted float64 // ∫ max/mean dt, in seconds
	busy     float64 // ∫ dt while sum > 0, in seconds
}

// set records that worker i runs n requests from now on.
func (b *runningBalance) set(now time.Duration, i, n int) {
	b.advance(now)
	if b.running[i] == n {
		return
	}
	b.sum += n - b.running[i]
	b.running[i] = n
	b.max = slices.Max(b.running)
}

// advance integrates up to now.
func (b *runningBalance) advance(now time.Duration) {
	if dt := (now - b.last).Seconds(); dt > 0 && b.sum > 0 {
		mean := float64(b.sum) / float64(len(b.running))
		b.weighted += float64(b.max) / mean * dt
		b.busy += dt
	}
	b.last = max(b.last, now)
}

// imbalance is the time-averaged max/mean; 0 when nothing ever ran.
func (b *runningBalance) imbalance() float64 {
	if b.busy == 0 {
		return 0
	}
	return b.weighted / b.busy
}

// percentile is the nearest-rank p-quantile (0 < p ≤ 1) of sorted, in
// seconds; 0 for no samples.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)].Seconds()
}
