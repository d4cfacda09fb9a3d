package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// schedule yields arrival times as offsets from the start of the run, in
// non-decreasing order. It is pure, so tests check the sequence itself and
// never the wall clock.
type schedule interface {
	next() (time.Duration, bool)
}

// poissonSchedule is an open-loop Poisson process: exponential gaps of mean
// 1/rate, drawn from a seeded PCG so a run can be replayed.
type poissonSchedule struct {
	rng  *rand.Rand
	rate float64 // arrivals a second
	t    float64 // seconds since start of the last arrival
}

var _ schedule = (*poissonSchedule)(nil)

func newPoissonSchedule(seed uint64, rate float64) *poissonSchedule {
	return &poissonSchedule{rng: rand.New(rand.NewPCG(seed, 0x6c6f616467656e)), rate: rate}
}

func (p *poissonSchedule) next() (time.Duration, bool) {
	p.t += p.rng.ExpFloat64() / p.rate
	return time.Duration(p.t * float64(time.Second)), true
}

// fixedSchedule replays precomputed offsets (a trace's timestamps).
type fixedSchedule struct {
	offsets []time.Duration
	i       int
}

var _ schedule = (*fixedSchedule)(nil)

func (f *fixedSchedule) next() (time.Duration, bool) {
	if f.i >= len(f.offsets) {
		return 0, false
	}
	f.i++
	return f.offsets[f.i-1], true
}

// sendFunc runs request i to completion and records its outcome.
type sendFunc func(i int)

// runOpenLoop makes arrival i at start+offset i until stop is done, limit
// arrivals were made (limit <= 0: no limit) or the schedule ends, then waits
// for the requests in flight.
//
// Arrivals never wait for completions: that is what makes latency under
// overload honest. An arrival that finds maxInflight requests outstanding is
// dropped (and counted) rather than queued, so a server that stalls cannot
// turn the load generator into an unbounded goroutine pile. When the loop
// falls behind its schedule (timer slack at thousands of arrivals a second)
// it sends the late arrivals at once, keeping the mean rate.
func runOpenLoop(stop context.Context, start time.Time, sched schedule, limit, maxInflight int, drop func(), send sendFunc) {
	var (
		wg       sync.WaitGroup
		inflight atomic.Int64
	)
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := 0; limit <= 0 || i < limit; i++ {
		off, ok := sched.next()
		if !ok {
			return
		}
		if wait := time.Until(start.Add(off)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-stop.Done():
				return
			case <-timer.C:
			}
		} else if stop.Err() != nil {
			return
		}
		if inflight.Add(1) > int64(maxInflight) {
			inflight.Add(-1)
			drop()
			continue
		}
		wg.Go(func() {
			defer inflight.Add(-1)
			send(i)
		})
	}
}

// runClosedLoop keeps workers requests outstanding: each worker sends its
// next request when the previous one ends, until stop is done or limit
// requests were started (limit <= 0: no limit).
func runClosedLoop(stop context.Context, workers, limit int, send sendFunc) {
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for range workers {
		wg.Go(func() {
			for stop.Err() == nil {
				i := int(next.Add(1) - 1)
				if limit > 0 && i >= limit {
					return
				}
				send(i)
			}
		})
	}
	wg.Wait()
}
