package workers

import (
	"sync"
	"time"
)

// BreakerState is the circuit breaker's state.
type BreakerState int

const (
	// BreakerClosed lets traffic through.
	BreakerClosed BreakerState = iota
	// BreakerOpen rejects traffic until its open period ends.
	BreakerOpen
	// BreakerHalfOpen lets exactly one trial request through.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	default:
		return "closed"
	}
}

// Breaker is a worker's passive circuit breaker: consecutive request
// failures open it; after OpenFor one trial request is let through, and its
// outcome closes or re-opens the circuit. Health checks find a dead worker
// within seconds; the breaker reacts to the requests themselves, at once.
type Breaker struct {
	threshold int // 0 disables
	openFor   time.Duration

	mu       sync.Mutex
	state    BreakerState
	failures int
	openedAt time.Time
	trial    bool // a half-open trial is in flight
}

// NewBreaker returns a closed breaker; threshold 0 disables it.
func NewBreaker(threshold int, openFor time.Duration) *Breaker {
	return &Breaker{threshold: threshold, openFor: openFor}
}

// State reports the state at now (an open circuit becomes half-open when its
// open period has passed).
func (b *Breaker) State(now time.Time) BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stateLocked(now)
}

func (b *Breaker) stateLocked(now time.Time) BreakerState {
	if b.state == BreakerOpen && now.Sub(b.openedAt) >= b.openFor {
		b.state = BreakerHalfOpen
		b.trial = false
	}
	return b.state
}

// Allows reports whether a new request may be routed to the worker: closed,
// or half-open with no trial in flight.
func (b *Breaker) Allows(now time.Time) bool {
	if b == nil || b.threshold == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.stateLocked(now) {
	case BreakerClosed:
		return true
	case BreakerHalfOpen:
		return !b.trial
	default:
		return false
	}
}

// Begin is called when a request is about to be sent. It returns false when
// the circuit refuses it (open, or half-open with its one trial taken), in
// which case the caller must pick another worker.
func (b *Breaker) Begin(now time.Time) bool {
	if b == nil || b.threshold == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.stateLocked(now) {
	case BreakerClosed:
		return true
	case BreakerHalfOpen:
		if b.trial {
			return false
		}
		b.trial = true
		return true
	default:
		return false
	}
}

// Success records a request the worker served.
func (b *Breaker) Success() {
	if b == nil || b.threshold == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	b.trial = false
	b.state = BreakerClosed
}

// Failure records a request the worker failed (connect error, timeout, 5xx,
// broken stream). It reports whether this failure opened the circuit.
func (b *Breaker) Failure(now time.Time) bool {
	if b == nil || b.threshold == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures++
	if b.state == BreakerHalfOpen || b.failures >= b.threshold {
		opened := b.state != BreakerOpen
		b.state = BreakerOpen
		b.openedAt = now
		b.trial = false
		return opened
	}
	return false
}

// Neutral ends a request that says nothing about the worker's health (the
// client went away, or a 4xx): a half-open trial slot is freed for the next.
func (b *Breaker) Neutral() {
	if b == nil || b.threshold == 0 {
		return
	}
	b.mu.Lock()
	b.trial = false
	b.mu.Unlock()
}
