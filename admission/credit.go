package admission

import (
	"sync/atomic"
	"time"
)

// Outcome is how an admitted request ended.
type Outcome int

const (
	// OutcomeSuccess: a worker served the request.
	OutcomeSuccess Outcome = iota
	// OutcomeFailure: routing or the worker failed it.
	OutcomeFailure
	// OutcomeCancelled: the client went away.
	OutcomeCancelled
	numOutcomes
)

// Credit is a dispatched request's slot, bound to (request id, model,
// partition, scheduler generation). It holds the slot against Capacity until
// Routed (routing's reservation then accounts for the request) and counts the
// request in its partition's in-flight until Released. Release must be called
// once the request ends, on every path; it is safe to call more than once.
type Credit struct {
	s  *Scheduler
	ps *partitionState

	requestID, model, partition string
	generation                  uint64
	issuedAt, expiresAt         time.Time // expiresAt zero: never
	cost                        int

	// Guarded by the scheduler's lock.
	routed    bool
	overdraft bool

	released atomic.Bool
	redeemed atomic.Bool
	proof    Proof
}

// RequestID is the id of the request the credit was issued to.
func (c *Credit) RequestID() string { return c.requestID }

// Model is the model the credit was issued for.
func (c *Credit) Model() string { return c.model }

// Partition is the partition the credit was issued in.
func (c *Credit) Partition() string { return c.partition }

// Generation is the scheduler generation that issued the credit.
func (c *Credit) Generation() uint64 { return c.generation }

// IssuedAt is when the request was dispatched.
func (c *Credit) IssuedAt() time.Time { return c.issuedAt }

// Cost is the request's cost in the fair share, in estimated tokens.
func (c *Credit) Cost() int { return c.cost }

// Routed hands the credit's slot to routing: call it once routing has taken
// its reservation for the request, never before (see the package doc). The
// scheduler stops counting the slot and dispatches into any slot that frees.
// Later calls, and calls after Release, do nothing.
func (c *Credit) Routed() {
	if c == nil {
		return
	}
	s := c.s
	s.mu.Lock()
	if !c.routed && !c.released.Load() {
		c.routed = true
		s.outstanding--
		s.dispatchLocked()
	}
	s.unlock()
}

// Release ends the credit: it returns the slot if the scheduler still holds
// it, adds servedTokens to the partition's served tokens, and dispatches
// into whatever slot is free. Only the first call counts, so a deferred
// Release is safe alongside an explicit one, and during panic unwinding.
// Release a routed request after routing's own reservation, so the slot the
// request frees is visible to the dispatch.
func (c *Credit) Release(o Outcome, servedTokens int) {
	if c == nil || !c.released.CompareAndSwap(false, true) {
		return
	}
	s, ps := c.s, c.ps
	s.mu.Lock()
	if !c.routed {
		s.outstanding--
	}
	if c.overdraft {
		c.overdraft = false
		ps.overdraft--
		s.shadowLen--
	}
	ps.inflight--
	ps.m.inflight.Dec()
	if servedTokens > 0 {
		ps.served += int64(servedTokens)
		ps.m.served.Add(float64(servedTokens))
	}
	if o >= 0 && o < numOutcomes {
		ps.completed[o]++
	}
	s.dispatchLocked()
	s.unlock()
}
