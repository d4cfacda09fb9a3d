package main

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPoissonScheduleMeanAndSpread(t *testing.T) {
	const (
		rate = 500.0
		n    = 100_000
	)
	s := newPoissonSchedule(42, rate)
	var prev time.Duration
	var sum, sumSq float64
	for range n {
		off, ok := s.next()
		if !ok || off < prev {
			t.Fatalf("arrival %v after %v (ok=%t): a Poisson schedule is endless and ordered", off, prev, ok)
		}
		gap := (off - prev).Seconds()
		sum += gap
		sumSq += gap * gap
		prev = off
	}
	mean := sum / n
	variance := sumSq/n - mean*mean
	assert.InEpsilon(t, 1/rate, mean, 0.02, "mean gap is 1/rate")
	// Exponential gaps: standard deviation equals the mean. A uniform or
	// fixed spacing would pass the mean check but not this one.
	assert.InEpsilon(t, mean, math.Sqrt(variance), 0.05)
	assert.InEpsilon(t, float64(n)/rate, prev.Seconds(), 0.02)
}

func TestPoissonScheduleSeeded(t *testing.T) {
	take := func(seed uint64) []time.Duration {
		s := newPoissonSchedule(seed, 100)
		out := make([]time.Duration, 50)
		for i := range out {
			out[i], _ = s.next()
		}
		return out
	}
	assert.Equal(t, take(7), take(7))
	assert.NotEqual(t, take(7), take(8))
}

func TestFixedSchedule(t *testing.T) {
	s := &fixedSchedule{offsets: []time.Duration{0, 5, 9}}
	var got []time.Duration
	for {
		off, ok := s.next()
		if !ok {
			break
		}
		got = append(got, off)
	}
	assert.Equal(t, []time.Duration{0, 5, 9}, got)
}

// collector records which requests a driver sent.
type collector struct {
	mu   sync.Mutex
	sent []int
}

func (c *collector) send(i int) {
	c.mu.Lock()
	c.sent = append(c.sent, i)
	c.mu.Unlock()
}

func (c *collector) sorted() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.sent))
}

func TestOpenLoopDropsOverMaxInflight(t *testing.T) {
	sched := &fixedSchedule{offsets: make([]time.Duration, 5)} // all at once
	started := make(chan int, 5)
	dropped := make(chan struct{}, 5)
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		runOpenLoop(context.Background(), time.Now(), sched, 0, 2,
			func() { dropped <- struct{}{} },
			func(i int) { started <- i; <-release })
	}()
	got := []int{<-started, <-started}
	for range 3 {
		<-dropped // arrivals 2, 3 and 4 find both slots taken
	}
	close(release)
	<-done
	assert.ElementsMatch(t, []int{0, 1}, got)
	assert.Empty(t, started)
}

func TestOpenLoopStops(t *testing.T) {
	t.Run("at the arrival limit", func(t *testing.T) {
		var c collector
		runOpenLoop(context.Background(), time.Now(), &fixedSchedule{offsets: make([]time.Duration, 10)}, 4, 100, func() { t.Error("dropped") }, c.send)
		assert.Equal(t, []int{0, 1, 2, 3}, c.sorted())
	})
	t.Run("at the end of the schedule", func(t *testing.T) {
		var c collector
		runOpenLoop(context.Background(), time.Now(), &fixedSchedule{offsets: make([]time.Duration, 3)}, 0, 100, func() {}, c.send)
		assert.Equal(t, []int{0, 1, 2}, c.sorted())
	})
	t.Run("when stopped while waiting for the next arrival", func(t *testing.T) {
		var c collector
		stop, cancel := context.WithCancel(context.Background())
		defer cancel()
		sched := &fixedSchedule{offsets: []time.Duration{0, time.Hour}}
		runOpenLoop(stop, time.Now(), sched, 0, 100, func() {}, func(i int) { c.send(i); cancel() })
		assert.Equal(t, []int{0}, c.sorted())
	})
	t.Run("already stopped", func(t *testing.T) {
		var c collector
		stop, cancel := context.WithCancel(context.Background())
		cancel()
		runOpenLoop(stop, time.Now(), &fixedSchedule{offsets: make([]time.Duration, 3)}, 0, 100, func() {}, c.send)
		assert.Empty(t, c.sorted())
	})
}

func TestOpenLoopWaitsForArrivalTimes(t *testing.T) {
	const gap = 30 * time.Millisecond
	start := time.Now()
	var second time.Duration
	runOpenLoop(context.Background(), start, &fixedSchedule{offsets: []time.Duration{0, gap}}, 0, 10, func() {}, func(i int) {
		if i == 1 {
			second = time.Since(start)
		}
	})
	assert.GreaterOrEqual(t, second, gap)
}

func TestClosedLoop(t *testing.T) {
	const workers, limit = 3, 40
	var (
		c              collector
		inflight, peak atomic.Int64
		mu             sync.Mutex
	)
	runClosedLoop(context.Background(), workers, limit, func(i int) {
		n := inflight.Add(1)
		mu.Lock()
		peak.Store(max(peak.Load(), n))
		mu.Unlock()
		time.Sleep(time.Millisecond)
		c.send(i)
		inflight.Add(-1)
	})
	want := make([]int, limit)
	for i := range want {
		want[i] = i
	}
	assert.Equal(t, want, c.sorted(), "every request exactly once")
	assert.LessOrEqual(t, peak.Load(), int64(workers))
}

func TestClosedLoopStops(t *testing.T) {
	const workers = 3
	var sent atomic.Int64
	var stopped atomic.Bool
	var lateStarts atomic.Int64
	stop, cancel := context.WithCancel(context.Background())
	defer cancel()
	runClosedLoop(stop, workers, 0, func(int) {
		// A send that begins after the stop was observed is the bug; sends
		// already past the loop's check when the stop came are not.
		if stopped.Load() && stop.Err() != nil {
			lateStarts.Add(1)
		}
		if sent.Add(1) == 5 {
			cancel()
			time.Sleep(10 * time.Millisecond) // let sends already under way finish
			stopped.Store(true)
		}
	})
	assert.GreaterOrEqual(t, sent.Load(), int64(5))
	assert.Zero(t, lateStarts.Load(), "no worker starts a request after the stop")
}
