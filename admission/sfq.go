package admission

// Start-time fair queueing (Goyal, Vin and Cheng, 1996) across partitions.
//
// Each request is tagged when it arrives: start S = max(V, F_p), where F_p is
// the finish tag of its partition's previous request, and finish
// F = S + cost/weight. The scheduler dispatches the waiting request with the
// smallest start tag, and the virtual time V becomes that tag. A partition
// that was idle restarts at V, so it neither banks credit for its idle time
// nor pays for the capacity others used meanwhile; a backlogged partition's
// tags advance by cost/weight per request, so over any busy period served
// tokens divide in proportion to the weights.

// tags are one request's position in the fair order.
type tags struct {
	start, finish float64
	// span is cost/weight at arrival, kept to re-tag after a withdrawal.
	span float64
	// arrivalV and prevFinish are V and F_p when the request arrived: with
	// them a withdrawal re-tags its successors exactly as if it never came.
	arrivalV, prevFinish float64
}

// arrive tags a request of cost on p at virtual time v and makes it p's last.
func (p *partitionState) arrive(v float64, cost int) tags {
	t := tags{span: float64(cost) / p.weight, arrivalV: v, prevFinish: p.lastFinish}
	t.start = max(v, p.lastFinish)
	t.finish = t.start + t.span
	p.lastFinish = t.finish
	return t
}

// retagAfterWithdrawal re-tags the queued requests that followed a withdrawn
// one (from next on), chaining from the withdrawn request's prevFinish, and
// restores F_p: a request that left the queue without service (cancelled,
// timed out) costs its partition nothing. Requests of a partition always
// queue behind one another, so its last tag is its tail's. A re-tagged start
// never falls below V: V only grows, every queued start is at least V, and
// the re-tag is bounded below by the withdrawn request's own inputs.
func (p *partitionState) retagAfterWithdrawal(next *Ticket, prevFinish float64) {
	for t := next; t != nil; t = t.next {
		t.prevFinish = prevFinish
		t.start = max(t.arrivalV, prevFinish)
		t.finish = t.start + t.span
		prevFinish = t.finish
	}
	p.lastFinish = prevFinish
}

// nextLocked returns the waiting request with the smallest start tag, the
// earliest arrival among equals. Each partition's head has its partition's
// smallest tag (tags grow along a queue), so only heads compete.
func (s *Scheduler) nextLocked() *Ticket {
	var best *Ticket
	for _, p := range s.order {
		h := p.head
		if h != nil && (best == nil || h.start < best.start || h.start == best.start && h.seq < best.seq) {
			best = h
		}
	}
	return best
}
