package admission

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Capacity is how many more requests the fleet can take right now: the
// gateway's issuable headroom in request slots, counting every request it has
// routed and nothing the scheduler holds (see the package doc). It is called
// under the scheduler's lock and must be cheap.
type Capacity interface {
	Available() int
}

// CapacityFunc adapts a function to Capacity.
type CapacityFunc func() int

// Available calls f.
func (f CapacityFunc) Available() int { return f() }

var _ Capacity = CapacityFunc(nil)

// Config is the scheduler's configuration.
type Config struct {
	Mode Mode
	// Partitions: names and weights (API keys are the Resolver's; the
	// scheduler keeps none).
	Partitions       []Partition
	DefaultPartition string
	// MaxQueuePerPartition bounds each partition's queue; 0 leaves it unbounded.
	MaxQueuePerPartition int
	// QueueTimeout bounds a request's wait; 0 waits as long as its context.
	QueueTimeout time.Duration
	// CreditTTL bounds the time from dispatch to redeeming or claiming the
	// credit's proof; 0 never expires.
	CreditTTL time.Duration
}

func (c *Config) validate() error {
	if !c.Mode.valid() {
		return fmt.Errorf("admission: invalid mode %v", c.Mode)
	}
	if c.MaxQueuePerPartition < 0 || c.QueueTimeout < 0 || c.CreditTTL < 0 {
		return fmt.Errorf("admission: max queue per partition, queue timeout and credit TTL must not be negative")
	}
	return validatePartitions(c.Partitions, c.DefaultPartition)
}

// limits is the part of Config the scheduler keeps.
type limits struct {
	mode         Mode
	maxQueue     int
	queueTimeout time.Duration
	creditTTL    time.Duration
}

// Request is what admission knows of a request.
type Request struct {
	ID    string
	Model string
	// Partition from the Resolver; empty means the default partition.
	Partition string
	// Cost is the estimated tokens (prompt + expected output); the fair
	// share divides tokens. Less than 1 counts as 1.
	Cost int
}

// Scheduler admits requests in fair-share order when the fleet is full.
type Scheduler struct {
	capacity Capacity
	clock    Clock
	metrics  *metrics
	// gen is bumped by Reconfigure; credits of older generations no longer
	// prove anything (ErrProofStale).
	gen atomic.Uint64

	mu      sync.Mutex
	lim     limits
	parts   map[string]*partitionState
	order   []*partitionState // config order: status, and the tie-break scan
	def     *partitionState
	virtual float64 // V of start-time fair queueing
	seq     uint64
	waiting int
	// outstanding counts credits issued and neither Routed nor Released: the
	// slots the scheduler holds that Capacity does not see yet.
	outstanding int
	pending     []*Ticket
	// shadowQueue holds, in arrival order, the credits shadow mode issued
	// while enforce would have queued them (Credit.overdraft); see
	// shadowDrainLocked.
	shadowQueue []*Credit
	shadowLen   int // credits in shadowQueue still marked overdraft
}

// NewScheduler returns a scheduler over capacity (required unless cfg.Mode
// is ModeOff), reading time from clock (nil: SystemClock), its metrics
// registered on reg (nil: not registered).
func NewScheduler(cfg Config, capacity Capacity, clock Clock, reg prometheus.Registerer) (*Scheduler, error) {
	if clock == nil {
		clock = SystemClock
	}
	s := &Scheduler{capacity: capacity, clock: clock, parts: map[string]*partitionState{}}
	if err := s.check(&cfg); err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.gen.Store(1)
	s.mu.Lock()
	s.applyLocked(&cfg)
	s.mu.Unlock()
	return s, nil
}

func (s *Scheduler) check(cfg *Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.Mode != ModeOff && s.capacity == nil {
		return fmt.Errorf("admission: mode %v needs a capacity", cfg.Mode)
	}
	return nil
}

// Generation is the scheduler's configuration generation (1, then +1 per
// Reconfigure).
func (s *Scheduler) Generation() uint64 { return s.gen.Load() }

// Admit returns a credit for r once the fleet has a slot for it and it is
// r's turn. It returns at once, without waiting or allocating beyond the
// credit, when a slot is free and nothing waits, and always in shadow and
// off modes. Errors: ErrUnknownPartition, *QueueFullError, ErrQueueTimeout,
// or ctx's error if ctx ends while r waits (r then leaves no trace).
func (s *Scheduler) Admit(ctx context.Context, r Request) (*Credit, error) {
	s.mu.Lock()
	ps, c, err := s.arriveLocked(&r)
	if c != nil || err != nil {
		s.unlock()
		return c, err
	}
	if err := ctx.Err(); err != nil {
		ps.m.decisions[decisionCancelled].Inc()
		s.unlock()
		return nil, err
	}
	t := s.enqueueLocked(ps, &r, cost(r.Cost), s.clock.Now(), make(chan struct{}), nil)
	s.unlock()

	select {
	case <-t.ready:
		return t.credit, t.err
	case <-ctx.Done():
	}
	if t.Cancel() {
		return nil, ctx.Err()
	}
	<-t.ready // the result raced the cancellation
	if t.err != nil {
		return nil, t.err
	}
	t.credit.Release(OutcomeCancelled, 0)
	return nil, ctx.Err()
}

// Submit is Admit without blocking, for event loops such as the fleet
// simulator: done receives the credit or the error exactly once — before
// Submit returns when r need not wait (Submit then returns nil), else later,
// outside the scheduler's lock, unless the returned Ticket is cancelled first.
func (s *Scheduler) Submit(r Request, done func(*Credit, error)) *Ticket {
	s.mu.Lock()
	ps, c, err := s.arriveLocked(&r)
	if c != nil || err != nil {
		s.unlock()
		done(c, err)
		return nil
	}
	t := s.enqueueLocked(ps, &r, cost(r.Cost), s.clock.Now(), nil, done)
	s.unlock()
	return t
}

func cost(c int) int { return max(c, 1) }

// arriveLocked decides an arriving request: a credit now, a refusal, or
// (neither) that it must wait.
func (s *Scheduler) arriveLocked(r *Request) (*partitionState, *Credit, error) {
	ps := s.def
	if r.Partition != "" {
		if ps = s.parts[r.Partition]; ps == nil {
			return nil, nil, fmt.Errorf("%w: %q", ErrUnknownPartition, r.Partition)
		}
	}
	switch s.lim.mode {
	case ModeOff:
		return ps, s.dispatchNowLocked(ps, r), nil
	case ModeShadow:
		free := s.freeLocked()
		s.shadowDrainLocked(max(0, -free))
		over := free <= 0
		rejected := over && s.lim.maxQueue > 0 && ps.overdraft >= s.lim.maxQueue
		c := s.dispatchNowLocked(ps, r)
		switch {
		case rejected:
			ps.m.decisions[decisionShadowWouldReject].Inc()
		case over:
			ps.m.decisions[decisionShadowWouldQueue].Inc()
			c.overdraft = true
			ps.overdraft++
			s.shadowQueue = append(s.shadowQueue, c)
			s.shadowLen++
		}
		return ps, c, nil
	}
	s.dispatchLocked() // catch up: capacity may have grown unannounced
	if s.waiting == 0 && s.freeLocked() > 0 {
		return ps, s.dispatchNowLocked(ps, r), nil
	}
	if s.lim.maxQueue > 0 && ps.queued >= s.lim.maxQueue {
		ps.m.decisions[decisionRejectedQueueFull].Inc()
		now := s.clock.Now()
		return ps, nil, &QueueFullError{
			Partition:  ps.name,
			Queued:     ps.queued,
			RetryAfter: retryAfter(ps.queued, ps.rate.perSecond(now), s.lim.queueTimeout),
		}
	}
	return ps, nil, nil
}

// Kick dispatches what can be dispatched now: call it when capacity may have
// grown (a telemetry sample arrived). Releasing or routing a credit kicks by
// itself.
func (s *Scheduler) Kick() {
	s.mu.Lock()
	s.dispatchLocked()
	s.unlock()
}

// Reconfigure replaces the mode, partitions, weights and limits, and bumps
// the generation: proofs of earlier credits go stale, though the credits
// themselves keep working until released. Partitions that stay keep their
// queues, tags and counts; requests queued in removed partitions fail with
// ErrUnknownPartition. On error nothing changes.
func (s *Scheduler) Reconfigure(cfg Config) error {
	if err := s.check(&cfg); err != nil {
		return err
	}
	s.mu.Lock()
	keep := make(map[string]bool, len(cfg.Partitions))
	for _, p := range cfg.Partitions {
		keep[p.Name] = true
	}
	for _, ps := range s.order {
		if keep[ps.name] {
			continue
		}
		for t := ps.head; t != nil; t = ps.head {
			s.unlinkLocked(t)
			s.deliverLocked(t, nil, fmt.Errorf("%w: %q was removed", ErrUnknownPartition, ps.name))
		}
		delete(s.parts, ps.name)
		s.metrics.dropPartition(ps.name)
	}
	s.gen.Add(1)
	s.applyLocked(&cfg)
	s.dispatchLocked()
	s.unlock()
	return nil
}

// applyLocked installs a validated configuration.
func (s *Scheduler) applyLocked(cfg *Config) {
	s.lim = limits{mode: cfg.Mode, maxQueue: cfg.MaxQueuePerPartition, queueTimeout: cfg.QueueTimeout, creditTTL: cfg.CreditTTL}
	s.order = s.order[:0]
	for _, p := range cfg.Partitions {
		ps := s.parts[p.Name]
		if ps == nil {
			ps = newPartitionState(p, s.virtual, s.metrics)
			s.parts[p.Name] = ps
		}
		ps.weight = p.Weight
		s.order = append(s.order, ps)
	}
	s.def = s.parts[cfg.DefaultPartition]
}

// shadowDrainLocked keeps shadow mode's picture of the queue enforce would
// have. In shadow every request runs, so the fleet runs over its capacity by
// exactly the requests enforce would still hold queued: when it is over by
// queued, the oldest marked credits beyond that many have, in enforce, left
// the queue for a freed slot. They lose their mark (and their partition's
// overdraft count) in arrival order, as enforce's FIFO within a partition
// would release them (across partitions, arrival order stands in for the
// fair order).
func (s *Scheduler) shadowDrainLocked(queued int) {
	for s.shadowLen > queued && len(s.shadowQueue) > 0 {
		c := s.shadowQueue[0]
		s.shadowQueue[0] = nil
		s.shadowQueue = s.shadowQueue[1:]
		if c.overdraft { // else released already, uncounted then
			c.overdraft = false
			c.ps.overdraft--
			s.shadowLen--
		}
	}
	// Credits released while marked stay until drained or compacted here.
	if len(s.shadowQueue) > 2*s.shadowLen+64 {
		kept := s.shadowQueue[:0]
		for _, c := range s.shadowQueue {
			if c.overdraft {
				kept = append(kept, c)
			}
		}
		clear(s.shadowQueue[len(kept):])
		s.shadowQueue = kept
	}
}
