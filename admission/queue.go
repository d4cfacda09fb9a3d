package admission

import "time"

// partitionState is one partition's queue, fair-share tag and accounting.
// Guarded by the scheduler's lock.
type partitionState struct {
	name   string
	weight float64
	// lastFinish is F_p, the finish tag of the partition's last request.
	lastFinish float64

	head, tail *Ticket
	queued     int
	// inflight counts credits not yet released; overdraft, those issued in
	// shadow mode while enforce would have queued them (the shadow queue).
	inflight  int
	overdraft int
	served    int64
	completed [numOutcomes]uint64
	rate      dispatchRate
	m         partitionMetrics
}

func newPartitionState(p Partition, v float64, m *metrics) *partitionState {
	return &partitionState{name: p.Name, weight: p.Weight, lastFinish: v, m: m.forPartition(p.Name)}
}

type ticketState uint8

const (
	ticketQueued ticketState = iota
	ticketDone               // dispatched or refused: the result is set
	ticketCancelled
)

// Ticket is a request waiting in its partition's queue for a credit.
type Ticket struct {
	s    *Scheduler
	ps   *partitionState
	req  Request
	cost int
	seq  uint64
	tags
	enqueuedAt time.Time
	prev, next *Ticket
	state      ticketState
	timer      Timer

	// Exactly one of ready (Admit: closed once the result is set) and done
	// (Submit: called with it, outside the lock) is set.
	ready  chan struct{}
	done   func(*Credit, error)
	credit *Credit
	err    error
}

// Cancel takes the request out of the queue, as if it had never come: its
// partition's tags and the queue gauges are restored. It reports whether the
// request was still waiting; if so, no result will be delivered for it.
func (t *Ticket) Cancel() bool {
	if t == nil {
		return false
	}
	s := t.s
	s.mu.Lock()
	ok := t.state == ticketQueued
	if ok {
		s.withdrawLocked(t)
		t.state = ticketCancelled
		t.ps.m.decisions[decisionCancelled].Inc()
	}
	s.unlock()
	return ok
}

// expire fails a request that waited QueueTimeout.
func (t *Ticket) expire() {
	s := t.s
	s.mu.Lock()
	if t.state == ticketQueued {
		s.withdrawLocked(t)
		t.ps.m.decisions[decisionTimeout].Inc()
		s.deliverLocked(t, nil, ErrQueueTimeout)
	}
	s.unlock()
}

// enqueueLocked tags r and appends it to its partition's queue.
func (s *Scheduler) enqueueLocked(ps *partitionState, r *Request, cost int, now time.Time, ready chan struct{}, done func(*Credit, error)) *Ticket {
	s.seq++
	t := &Ticket{s: s, ps: ps, req: *r, cost: cost, seq: s.seq, enqueuedAt: now, ready: ready, done: done}
	t.tags = ps.arrive(s.virtual, cost)
	t.prev = ps.tail
	if ps.tail != nil {
		ps.tail.next = t
	} else {
		ps.head = t
	}
	ps.tail = t
	ps.queued++
	s.waiting++
	ps.m.queueDepth.Inc()
	ps.m.decisions[decisionQueued].Inc()
	if s.lim.queueTimeout > 0 {
		t.timer = s.clock.AfterFunc(s.lim.queueTimeout, t.expire)
	}
	return t
}

// unlinkLocked takes t out of its queue, leaving the tags alone.
func (s *Scheduler) unlinkLocked(t *Ticket) {
	ps := t.ps
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		ps.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		ps.tail = t.prev
	}
	t.prev, t.next = nil, nil
	ps.queued--
	s.waiting--
	ps.m.queueDepth.Dec()
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
}

// withdrawLocked takes t out of its queue without service and rolls its
// partition's tags back as if it had never arrived.
func (s *Scheduler) withdrawLocked(t *Ticket) {
	next, prevFinish := t.next, t.prevFinish
	s.unlinkLocked(t)
	t.ps.retagAfterWithdrawal(next, prevFinish)
}

// deliverLocked sets t's result; Submit's callback runs once the lock is
// released (unlock), so it may call the scheduler.
func (s *Scheduler) deliverLocked(t *Ticket, c *Credit, err error) {
	t.state = ticketDone
	t.credit, t.err = c, err
	if t.ready != nil {
		close(t.ready)
		return
	}
	s.pending = append(s.pending, t)
}

// unlock releases the scheduler's lock, then runs the Submit callbacks whose
// results were set under it.
func (s *Scheduler) unlock() {
	if len(s.pending) == 0 {
		s.mu.Unlock()
		return
	}
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, t := range pending {
		t.done(t.credit, t.err)
	}
}
