package admission

import (
	"fmt"
	"sync/atomic"
)

// Proof is a redeemed credit: evidence that the fair-share scheduler
// admitted this very request, claimable exactly once. Distribution seeding
// claims it before it touches routing state, so one admission can never
// seed twice.
type Proof struct {
	c       *Credit
	claimed atomic.Bool
}

// Redeem turns the credit into its proof, once: it checks the binding to the
// request (ErrProofMismatch, which consumes nothing), that the credit is still
// held (ErrProofCancelled), of the current generation (ErrProofStale) and
// within its TTL (ErrProofExpired). A second Redeem is ErrProofReplayed.
func (c *Credit) Redeem(requestID, model, partition string) (*Proof, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: no credit", ErrProofMismatch)
	}
	switch {
	case requestID != c.requestID:
		return nil, fmt.Errorf("%w: request id", ErrProofMismatch)
	case model != c.model:
		return nil, fmt.Errorf("%w: model", ErrProofMismatch)
	case partition != c.partition:
		return nil, fmt.Errorf("%w: partition", ErrProofMismatch)
	}
	if err := c.valid(); err != nil {
		return nil, err
	}
	if !c.redeemed.CompareAndSwap(false, true) {
		return nil, ErrProofReplayed
	}
	c.proof.c = c
	return &c.proof, nil
}

// valid is whether the credit still proves an admission now.
func (c *Credit) valid() error {
	switch {
	case c.released.Load():
		return ErrProofCancelled
	case c.generation != c.s.gen.Load():
		return ErrProofStale
	case !c.expiresAt.IsZero() && c.s.clock.Now().After(c.expiresAt):
		return ErrProofExpired
	}
	return nil
}

// Claim consumes the proof: the first call, among any number of concurrent
// ones, takes it; every other gets ErrProofReplayed. The first call also
// re-checks the credit (released, stale or expired since Redeem fails it), and
// a failed claim is consumed all the same: a proof never yields two chances.
func (p *Proof) Claim() error {
	if p == nil || p.c == nil {
		return fmt.Errorf("%w: no proof", ErrProofMismatch)
	}
	if !p.claimed.CompareAndSwap(false, true) {
		return ErrProofReplayed
	}
	return p.c.valid()
}

// RequestID is the id of the request the proof admits.
func (p *Proof) RequestID() string { return p.c.requestID }

// Model is the model of the request the proof admits.
func (p *Proof) Model() string { return p.c.model }

// Partition is the partition of the request the proof admits.
func (p *Proof) Partition() string { return p.c.partition }

// Generation is the scheduler generation that issued the proof's credit.
func (p *Proof) Generation() uint64 { return p.c.generation }
