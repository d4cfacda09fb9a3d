package routing

import "time"

// SpillState is where a prefix stands in pressure-driven replication.
type SpillState uint8

const (
	// SpillIdle: no replication in progress; a pressured prefix may spill or seed.
	SpillIdle SpillState = iota
	// SpillCooling: a spill chose a destination that is a provisional owner
	// until the cooldown ends; requests that would spill again are held.
	SpillCooling
	// SeedInFlight: a distribution seed holds a lease on a clean worker; the
	// worker is invisible to ordinary routing for the prefix until it commits.
	SeedInFlight
	// SeedCooldown: a seed committed; no new seed or spill until it ends.
	SeedCooldown
)

func (s SpillState) String() string {
	switch s {
	case SpillCooling:
		return "cooling"
	case SeedInFlight:
		return "seed_in_flight"
	case SeedCooldown:
		return "seed_cooldown"
	}
	return "idle"
}

// prefixProtection is the replication state machine of one prefix. It is the
// one place that decides whether a pressured prefix may grow a new owner,
// by an ordinary spill or by a distribution seed, and it lets one of them
// win at a time:
//
//	idle ──spill(dest)──▶ cooling(dest, until) ──cooldown ends──▶ idle
//	idle ──seed(lease)──▶ seed_in_flight ──commit──▶ seed_cooldown(until) ──ends──▶ idle
//	                              └──fail / abort──▶ idle (a failure quarantines the peer)
type prefixProtection struct {
	state SpillState
	dest  string
	until time.Time
	lease *SeedLease
}

// current returns the state at now, lapsing an ended cooldown to idle. A
// seed in flight does not lapse: its request always ends (Decision.Done).
func (p *prefixProtection) current(now time.Time) SpillState {
	if (p.state == SpillCooling || p.state == SeedCooldown) && !now.Before(p.until) {
		*p = prefixProtection{}
	}
	return p.state
}

// seed moves an idle prefix to seed_in_flight under lease; false (nothing
// changed) unless idle.
func (p *prefixProtection) seed(lease *SeedLease, now time.Time) bool {
	if p.current(now) != SpillIdle {
		return false
	}
	*p = prefixProtection{state: SeedInFlight, dest: lease.Worker, lease: lease}
	return true
}

// endSeed ends lease's seed: committed → seed_cooldown until until;
// otherwise idle. A lease that is not the current one changes nothing.
func (p *prefixProtection) endSeed(lease *SeedLease, committed bool, until time.Time) {
	if p.state != SeedInFlight || p.lease != lease {
		return
	}
	if committed {
		*p = prefixProtection{state: SeedCooldown, dest: lease.Worker, until: until}
		return
	}
	*p = prefixProtection{}
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
	if p.state == SeedInFlight {
		return p // never dropped while a lease is out
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
		for k, q := range ps.byPrefix {
			if len(ps.byPrefix) < ps.maxTracked/2 {
				break
			}
			if q.state != SeedInFlight { // a lease's machine must outlive the lease
				delete(ps.byPrefix, k)
			}
		}
	}
	ps.byPrefix[prefix] = p
}

// peek returns the machine of prefix if one is kept, without creating one.
func (ps *protections) peek(prefix uint64) (*prefixProtection, bool) {
	p, ok := ps.byPrefix[prefix]
	return p, ok
}
