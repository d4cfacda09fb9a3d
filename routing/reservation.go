package routing

import "time"

// reservedWork is what the gateway dispatched to one worker that the
// worker's last telemetry sample cannot include yet.
//
// A sample counts what was running when it was taken, so only work reserved
// after the sample adds to it: each new sample opens a new epoch and zeroes
// the per-epoch counters, and releasing a reservation from an older epoch
// leaves the current epoch alone (the sample already counted it, and the
// next sample will stop counting it). Without telemetry the epoch never
// turns and reservations are simply the gateway's own in-flight work.
type reservedWork struct {
	id         string
	generation uint64
	sampledAt  time.Time
	epoch      uint64
	reqs       int // reserved since the sample
	tokens     int

	outstandingReqs   int // every reservation not yet released, for bookkeeping checks
	outstandingTokens int
}

// reservation is one decision's share of a worker's reservedWork. It points
// at the record it was taken from: a worker removed and re-added gets a new
// record, and releases of the old one's reservations leave the new alone.
type reservation struct {
	rw     *reservedWork
	epoch  uint64
	tokens int
}

// reservedFor returns e's reservation counters, turning the epoch when a new
// sample has arrived and resetting them when the worker's generation changed.
func (r *Router) reservedFor(e Endpoint) *reservedWork {
	rw, ok := r.reserved[e.ID]
	if !ok {
		rw = &reservedWork{id: e.ID, generation: e.Generation, sampledAt: e.Load.SampledAt}
		r.reserved[e.ID] = rw
	}
	return r.turn(rw, e)
}

// reservedAt is reservedFor for the candidate at position i of the pool's
// list: the pool lists the same workers in the same order nearly every
// time, so the record found there last time is checked first (an id
// comparison) before the map.
func (r *Router) reservedAt(i int, e Endpoint) *reservedWork {
	if i < len(r.byPos) {
		if rw := r.byPos[i]; rw != nil && rw.id == e.ID {
			return r.turn(rw, e)
		}
	} else {
		r.byPos = append(r.byPos, make([]*reservedWork, i+1-len(r.byPos))...)
	}
	rw := r.reservedFor(e)
	r.byPos[i] = rw
	return rw
}

// turn opens a new epoch of rw when e brings a newer sample or a new
// incarnation.
func (r *Router) turn(rw *reservedWork, e Endpoint) *reservedWork {
	// A new incarnation, or a new sample, opens a new epoch: older
	// reservations still release into the outstanding totals, never into it.
	if rw.generation != e.Generation {
		// A new incarnation: whatever the policy thought it held is gone.
		r.dropOwnership(e.ID)
	}
	if rw.generation != e.Generation || e.Load.SampledAt.After(rw.sampledAt) {
		rw.generation = e.Generation
		rw.sampledAt = e.Load.SampledAt
		rw.epoch++
		rw.reqs, rw.tokens = 0, 0
	}
	return rw
}

func (r *Router) reserveLocked(e Endpoint, tokens int) reservation {
	rw := r.reservedFor(e)
	rw.reqs++
	rw.tokens += tokens
	rw.outstandingReqs++
	rw.outstandingTokens += tokens
	return reservation{rw: rw, epoch: rw.epoch, tokens: tokens}
}

func (r *Router) release(res reservation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rw := res.rw
	rw.outstandingReqs--
	rw.outstandingTokens -= res.tokens
	if rw.epoch == res.epoch {
		rw.reqs--
		rw.tokens -= res.tokens
	}
}
