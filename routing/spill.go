package routing

import "time"

// SpillState is where a prefix stands in pressure-driven replication.
type SpillState uint8

const (
	// SpillIdle: no replication in progress; a pressured prefix may spill.
	SpillIdle SpillState = iota
	// SpillCooling: a spill chose a destination that is a provisional owner
	// until the cooldown ends; requests that would spill again coalesce on it.
	SpillCooling
)

func (s SpillState) String() string {
	if s == SpillCooling {
		return "cooling"
	}
	return "idle"
}

// prefixProtection is the replication state machine of one prefix. It is the
// one place that decides whether a pressured prefix may grow a new owner:
//
//	idle ──spill(dest)──▶ cooling(dest, until) ──cooldown ends──▶ idle
//
// Issue #4 extends it with seeding states (a seed in flight, success
// cooldown, failure quarantine) so ordinary spills and seeds are serialized
// by the same machine: one winner, never both.
type prefixProtection struct {
	state SpillState
	dest  string
	until time.Time
}

// current returns the state at now, lapsing an ended cooldown to idle.
func (p *prefixProtection) current(now time.Time) SpillState {
	if p.state == SpillCooling && !now.Before(p.until) {
		*p = prefixProtection{}
	}
	return p.state
}

// spill moves an idle prefix to cooling on dest. It reports false (and
// changes nothing) unless the prefix is idle: one winner per cooldown.
func (p *prefixProtection) spill(dest string, now time.Time, cooldown time.Duration) bool {
	if p.current(now) != SpillIdle {
		return false
	}
	*p = prefixProtection{state: SpillCooling, dest: dest, until: now.Add(cooldown)}
	return true
}

// protections holds the state machines of the prefixes that have one; idle
// machines are not kept. It is bounded: past maxTracked it sweeps the
// lapsed ones.
type protections struct {
	byPrefix   map[uint64]*prefixProtection
	maxTracked int
}

func newProtections(maxTracked int) *protections {
	return &protections{byPrefix: map[uint64]*prefixProtection{}, maxTracked: maxTracked}
}

func (ps *protections) get(prefix uint64, now time.Time) *prefixProtection {
	p, ok := ps.byPrefix[prefix]
	if !ok {
		return &prefixProtection{}
	}
	if p.current(now) == SpillIdle {
		delete(ps.byPrefix, prefix)
	}
	return p
}

// put keeps p for prefix. Past maxTracked it sweeps the lapsed machines and,
// if every one is still cooling, drops one at random (Go's map order): a
// spill forgotten early only lets its prefix spill again sooner. A sweep
// halves the map at least, so sweeps stay rare.
func (ps *protections) put(prefix uint64, p *prefixProtection, now time.Time) {
	if len(ps.byPrefix) >= ps.maxTracked {
		for k, q := range ps.byPrefix {
			if q.current(now) == SpillIdle {
				delete(ps.byPrefix, k)
			}
		}
		for k := range ps.byPrefix {
			if len(ps.byPrefix) < ps.maxTracked/2 {
				break
			}
			delete(ps.byPrefix, k)
		}
	}
	ps.byPrefix[prefix] = p
}
