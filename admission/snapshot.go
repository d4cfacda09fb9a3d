package admission

// Status is the scheduler's state at one instant, for the status page.
type Status struct {
	Mode       Mode
	Generation uint64
	// Outstanding: credits issued and neither routed nor released.
	Outstanding int
	Partitions  []PartitionStatus // in configuration order
}

// PartitionStatus is one partition's state.
type PartitionStatus struct {
	Name   string
	Weight float64
	// Queued: waiting for a credit. Inflight: holding one.
	Queued, Inflight int
	ServedTokens     int64
	// Completed requests by outcome.
	Succeeded, Failed, Cancelled uint64
}

// Snapshot returns the scheduler's current state.
func (s *Scheduler) Snapshot() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{
		Mode:        s.lim.mode,
		Generation:  s.gen.Load(),
		Outstanding: s.outstanding,
		Partitions:  make([]PartitionStatus, 0, len(s.order)),
	}
	for _, ps := range s.order {
		st.Partitions = append(st.Partitions, PartitionStatus{
			Name:         ps.name,
			Weight:       ps.weight,
			Queued:       ps.queued,
			Inflight:     ps.inflight,
			ServedTokens: ps.served,
			Succeeded:    ps.completed[OutcomeSuccess],
			Failed:       ps.completed[OutcomeFailure],
			Cancelled:    ps.completed[OutcomeCancelled],
		})
	}
	return st
}
