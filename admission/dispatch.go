package admission

import "time"

// freeLocked is the slots the scheduler may still fill: the fleet's free
// slots less the credits it issued that the fleet does not see yet.
func (s *Scheduler) freeLocked() int {
	return s.capacity.Available() - s.outstanding
}

// dispatchLocked issues credits to waiting requests in fair order while a
// slot is free (in enforce mode) or until none waits (otherwise). Capacity
// is read once a pass, not once a dispatch: it walks the fleet, and each
// credit issued takes one slot of it (the fleet sees none of them yet).
func (s *Scheduler) dispatchLocked() {
	if s.waiting == 0 {
		return
	}
	enforce := s.lim.mode == ModeEnforce
	free := 0
	if enforce {
		free = s.freeLocked()
	}
	var now time.Time
	for s.waiting > 0 {
		if enforce {
			if free <= 0 {
				return
			}
			free--
		}
		if now.IsZero() {
			now = s.clock.Now()
		}
		t := s.nextLocked()
		s.unlinkLocked(t)
		s.virtual = t.start
		c := s.issueLocked(t.ps, &t.req, t.cost, now)
		t.ps.m.wait.Observe(now.Sub(t.enqueuedAt).Seconds())
		s.deliverLocked(t, c, nil)
	}
}

// dispatchNowLocked tags and dispatches an arriving request that need not
// wait: with nothing queued, it is the smallest start tag by definition.
func (s *Scheduler) dispatchNowLocked(ps *partitionState, r *Request) *Credit {
	cost := cost(r.Cost)
	s.virtual = ps.arrive(s.virtual, cost).start
	c := s.issueLocked(ps, r, cost, s.clock.Now())
	ps.m.wait.Observe(0)
	return c
}

// issueLocked creates the credit of a dispatch and counts it: one more
// outstanding slot, one more request in flight for the partition.
func (s *Scheduler) issueLocked(ps *partitionState, r *Request, cost int, now time.Time) *Credit {
	c := &Credit{
		s:          s,
		ps:         ps,
		requestID:  r.ID,
		model:      r.Model,
		partition:  ps.name,
		generation: s.gen.Load(),
		issuedAt:   now,
		cost:       cost,
	}
	if s.lim.creditTTL > 0 {
		c.expiresAt = now.Add(s.lim.creditTTL)
	}
	s.outstanding++
	ps.inflight++
	ps.rate.record(now)
	ps.m.inflight.Inc()
	ps.m.decisions[decisionAdmitted].Inc()
	return c
}
