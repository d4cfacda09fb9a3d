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

// Health is what one finished request says about its worker.
type Health int

const (
	// HealthNeutral: nothing (the client went away, a 4xx, a 429).
	HealthNeutral Health = iota
	// HealthSuccess: the worker served the request.
	HealthSuccess
	// HealthFailure: connect error, timeout, 5xx, broken stream.
	HealthFailure
)

// Ticket binds a request's outcome to the breaker state it started in.
type Ticket struct {
	epoch uint64
	trial bool
}

// Breaker is a worker's passive circuit breaker: FailureThreshold
// consecutive failures open it; after OpenFor one trial request is let
// through, and its outcome alone closes or re-opens the circuit.
//
// Every state change starts a new epoch, and an outcome counts only in the
// epoch its request began in: a long request that began before the circuit
// opened cannot close it, a late failure cannot extend an open period, and
// no request but the trial decides a half-open circuit.
type Breaker struct {
	threshold int // 0 disables
	openFor   time.Duration

	mu       sync.Mutex
	state    BreakerState
	epoch    uint64
	failures int
	openedAt time.Time
	trial    bool // the half-open trial is in flight
}

// NewBreaker returns a closed breaker; threshold 0 disables it.
func NewBreaker(threshold int, openFor time.Duration) *Breaker {
	return &Breaker{threshold: threshold, openFor: openFor}
}

func (b *Breaker) disabled() bool { return b == nil || b.threshold == 0 }

// State reports the state at now.
func (b *Breaker) State(now time.Time) BreakerState {
	if b.disabled() {
		return BreakerClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stateLocked(now)
}

func (b *Breaker) stateLocked(now time.Time) BreakerState {
	if b.state == BreakerOpen && now.Sub(b.openedAt) >= b.openFor {
		b.transition(BreakerHalfOpen, now)
	}
	return b.state
}

func (b *Breaker) transition(s BreakerState, now time.Time) {
	b.state = s
	b.epoch++
	b.failures = 0
	b.trial = false
	if s == BreakerOpen {
		b.openedAt = now
	}
}

// Allows reports whether a new request may be routed to the worker: closed,
// or half-open with no trial in flight.
func (b *Breaker) Allows(now time.Time) bool {
	if b.disabled() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.stateLocked(now) {
	case BreakerClosed:
		return true
	case BreakerHalfOpen:
		return !b.trial
	}
	return false
}

// Begin is called just before a request is sent. It returns false when the
// circuit refuses it (open, or half-open with its one trial taken); the
// caller must then pick another worker. Otherwise the ticket must be handed
// to End exactly once.
func (b *Breaker) Begin(now time.Time) (Ticket, bool) {
	if b.disabled() {
		return Ticket{}, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.stateLocked(now) {
	case BreakerClosed:
		return Ticket{epoch: b.epoch}, true
	case BreakerHalfOpen:
		if b.trial {
			return Ticket{}, false
		}
		b.trial = true
		return Ticket{epoch: b.epoch, trial: true}, true
	}
	return Ticket{}, false
}

// End records how the request of ticket t went. It reports whether this
// outcome opened the circuit.
func (b *Breaker) End(t Ticket, h Health, now time.Time) (opened bool) {
	if b.disabled() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if t.epoch != b.epoch {
		return false // the request began in another state: its outcome is old news
	}
	switch b.state {
	case BreakerClosed:
		switch h {
		case HealthSuccess:
			b.failures = 0
		case HealthFailure:
			b.failures++
			if b.failures >= b.threshold {
				b.transition(BreakerOpen, now)
				return true
			}
		}
	case BreakerHalfOpen:
		if !t.trial {
			return false
		}
		switch h {
		case HealthSuccess:
			b.transition(BreakerClosed, now)
		case HealthFailure:
			b.transition(BreakerOpen, now)
			return true
		default:
			b.trial = false // the trial said nothing: let another try
		}
	}
	return false
}
