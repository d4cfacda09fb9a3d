package routing

import (
	"slices"
	"time"
)

// Decision labels of cache_aware.
const (
	// LabelOwnerHit: a suitable owner of the longest matched prefix took it.
	LabelOwnerHit Label = "owner_hit"
	// LabelColdP2C: no usable owner (cold miss, or owners stale, excluded or
	// gone): size-aware power of two choices.
	LabelColdP2C Label = "cold_p2c"
	// LabelPressureSpill: every owner pressured; one new owner was made.
	LabelPressureSpill Label = "pressure_spill"
	// LabelSpillCoalesced: every owner pressured and a spill is cooling
	// down: the request is held on the least-pressured owner (which may be
	// the destination) instead of spilling again.
	LabelSpillCoalesced Label = "spill_coalesced"
	// LabelCeilingHold: every owner pressured at the replication ceiling:
	// held on the least-pressured owner.
	LabelCeilingHold Label = "ceiling_hold"
	// LabelNoSafeHomeHold: every owner pressured and no worker anywhere is
	// below the high-water mark: held on the least-pressured owner.
	LabelNoSafeHomeHold Label = "no_safe_home_hold"
)

// CacheAware routes owner-first: a request goes to a worker that holds its
// longest prefix unless every such owner is pressured, and only then may the
// prefix grow one more owner, up to a ceiling. Pressure is ranked and
// filtered inside the owner set only, never against the fleet: one unrelated
// hot worker must not make every prefix abandon its cache. (The incident
// this answers: one worker with 38 running and 64–102 waiting on a shared
// prefix while peers idled, because replication was treated as a target and
// fleet-wide imbalance drove churn instead of relief.)
//
// The ceiling and the spill cooldown are per distinct prefix: the deepest
// block the candidates hold. Sessions that share a system prompt and then
// diverge are distinct prefixes, each with its own owners.
type CacheAware struct {
	cfg     PolicyConfig
	index   *Index
	spills  *protections
	seeding *seeding // nil when seeding is off
	avg     avgWork

	ids      []string // scratch, reused under the router's lock
	owners   []Owner
	ownerIdx []int
	load     []ownerLoad
	others   []Candidate
	otherIdx []int
	barred   []string
	kept     []Candidate
	keptIdx  []int
}

// ownerLoad is an owner's pressure, or unknown.
type ownerLoad struct {
	p     float64
	known bool
}

var _ Policy = (*CacheAware)(nil)

// NewCacheAware returns the cache_aware policy with its own index.
func NewCacheAware(cfg PolicyConfig, index *Index) *CacheAware {
	p := &CacheAware{cfg: cfg, index: index, spills: newProtections(1 << 16)}
	if cfg.Seeding.Enabled {
		p.seeding = newSeeding(cfg.Seeding)
	}
	return p
}

// Name implements Policy.
func (*CacheAware) Name() string { return "cache_aware" }

// Index is the policy's ownership index.
func (p *CacheAware) Index() *Index { return p.index }

// Select implements Policy. A worker whose distribution seed of this prefix
// (or of an ancestor) failed is quarantined: it is not a candidate for the
// request at all, unless every candidate is.
func (p *CacheAware) Select(req *Request, cands []Candidate, s *Scratch) (int, Label) {
	if p.seeding == nil {
		return p.selectAmong(req, cands, s)
	}
	p.barred = p.seeding.barred(req.Prefix, s.Now, p.barred[:0])
	if len(p.barred) == 0 {
		return p.selectAmong(req, cands, s)
	}
	p.kept, p.keptIdx = p.kept[:0], p.keptIdx[:0]
	for i := range cands {
		if !slices.Contains(p.barred, cands[i].ID) {
			p.kept = append(p.kept, cands[i])
			p.keptIdx = append(p.keptIdx, i)
		}
	}
	if len(p.kept) == 0 {
		return p.selectAmong(req, cands, s)
	}
	i, label := p.selectAmong(req, p.kept, s)
	if i < 0 {
		return i, label
	}
	return p.keptIdx[i], label
}

func (p *CacheAware) selectAmong(req *Request, cands []Candidate, s *Scratch) (int, Label) {
	avg := p.avg.observe(s.Work)
	if len(req.Prefix) == 0 {
		return PowerOfTwo(cands, s, avg), LabelColdP2C
	}
	p.ids = p.ids[:0]
	for i := range cands {
		p.ids = append(p.ids, cands[i].ID)
	}
	matched, owners := p.index.Match(req.Prefix, s.Now, p.ids, p.owners[:0])
	p.owners = owners

	// Owners are candidates by construction (Match looks among them only).
	p.ownerIdx, p.load = p.ownerIdx[:0], p.load[:0]
	for _, o := range owners {
		if i := indexOf(cands, o.Worker); i >= 0 {
			p.ownerIdx = append(p.ownerIdx, i)
			pr, known := ownerPressure(&cands[i])
			p.load = append(p.load, ownerLoad{pr, known})
		}
	}
	if len(p.ownerIdx) == 0 {
		var i int
		if p.cfg.HashedColdPlacement {
			i = hashedTwoChoices(cands, req.Prefix[len(req.Prefix)-1], avg)
		} else {
			i = PowerOfTwo(cands, s, avg)
		}
		p.record(req.Prefix, cands[i].ID, s, 0)
		return i, LabelColdP2C
	}

	// Suitable owners: below the high-water mark and within the slack of
	// the least-pressured known owner. An owner whose pressure is unknown
	// fails open (it is suitable) but sets no baseline for the others.
	minP, anyKnown := 0.0, false
	for _, l := range p.load {
		if l.known && (!anyKnown || l.p < minP) {
			minP, anyKnown = l.p, true
		}
	}
	best := -1
	for k, i := range p.ownerIdx {
		l := p.load[k]
		if l.known && (l.p >= p.cfg.PressureHighWater || l.p > minP+p.cfg.PressureSlack) {
			continue
		}
		if best < 0 || lessReserved(&cands[i], l.p, &cands[p.ownerIdx[best]], p.load[best].p) {
			best = k
		}
	}
	if best >= 0 {
		i := p.ownerIdx[best]
		p.record(req.Prefix, cands[i].ID, s, matched)
		return i, LabelOwnerHit
	}
	return p.pressured(req, matched, len(owners), cands, s, avg)
}

// pressured decides for a prefix whose every owner is pressured.
func (p *CacheAware) pressured(req *Request, matched, ownerCount int, cands []Candidate, s *Scratch, avg int) (int, Label) {
	key := req.Prefix[matched-1]
	prot := p.spills.get(key, s.Now)
	hold := p.leastPressuredOwner()
	switch prot.current(s.Now) {
	case SpillCooling:
		p.record(req.Prefix, cands[hold].ID, s, matched)
		return hold, LabelSpillCoalesced
	case SeedInFlight, SeedCooldown:
		// A seed holds the prefix's one expansion slot: no spill meanwhile.
		return p.holdOrSeed(req, key, matched, prot, hold, LabelSpillCoalesced, cands, s)
	}
	if p.cfg.MaxCachedOwnersPerPrefix <= 0 || ownerCount >= p.cfg.MaxCachedOwnersPerPrefix {
		return p.holdOrSeed(req, key, matched, prot, hold, LabelCeilingHold, cands, s)
	}
	// A destination: a non-owner known to be clear of the high-water mark
	// by the slack (its own in-flight work counts), by size-aware power of
	// two choices. A worker just under the mark would be over it once it
	// has computed the spilled prefix (a long one fills its KV cache), and
	// its own prefixes would then spill in turn: without the margin, spills
	// feed each other across a fleet near the mark.
	p.others, p.otherIdx = p.others[:0], p.otherIdx[:0]
	for i := range cands {
		if p.isOwner(i) {
			continue
		}
		if pr, known := ownerPressure(&cands[i]); known && pr >= p.cfg.PressureHighWater-p.cfg.PressureSlack {
			continue
		}
		p.others = append(p.others, cands[i])
		p.otherIdx = append(p.otherIdx, i)
	}
	if len(p.others) == 0 {
		return p.holdOrSeed(req, key, matched, prot, hold, LabelNoSafeHomeHold, cands, s)
	}
	i := p.otherIdx[PowerOfTwo(p.others, s, avg)]
	dest := cands[i].ID
	prot.spill(dest, s.Now, p.cfg.SpillCooldown)
	p.spills.put(key, prot, s.Now)
	// The destination is a provisional owner of the whole chain: it has
	// computed none of it yet, and it has the prefix's one spill.
	s.Matched, s.Stamp = 0, p.index.Record(req.Prefix, dest, KindProvisional, s.Now, p.cfg.SpillCooldown)
	s.Spill, s.Spilling = key, true
	return i, LabelPressureSpill
}

// spillFailed gives a prefix back its expansion when the request that
// spilled it to dest did not succeed: dest has lost the ownership the
// spill gave it (Decision.Done withdrew it), and the prefix, still
// pressured, must not wait out the cooldown held on full owners.
func (p *CacheAware) spillFailed(prefix uint64, dest string, now time.Time) {
	if prot, ok := p.spills.peek(prefix); ok && prot.current(now) == SpillCooling && prot.dest == dest {
		*prot = prefixProtection{}
	}
}

// holdOrSeed holds the request on the least-pressured owner, unless
// distribution seeding is on and may send it to one clean worker instead;
// with seeding on, a hold is labelled with the reason it did not seed.
func (p *CacheAware) holdOrSeed(req *Request, key uint64, matched int, prot *prefixProtection, hold int, label Label,
	cands []Candidate, s *Scratch) (int, Label) {
	if p.seeding != nil {
		i, why := p.trySeed(req, key, matched, prot, cands, s)
		if i >= 0 {
			s.Matched = 0
			return i, why
		}
		label = why
	}
	p.record(req.Prefix, cands[hold].ID, s, matched)
	return hold, label
}

func (p *CacheAware) isOwner(i int) bool {
	for _, j := range p.ownerIdx {
		if j == i {
			return true
		}
	}
	return false
}

// leastPressuredOwner is the owner to hold a request on.
func (p *CacheAware) leastPressuredOwner() int {
	best := 0
	for k := range p.ownerIdx {
		if p.load[k].p < p.load[best].p {
			best = k
		}
	}
	return p.ownerIdx[best]
}

// record marks the chosen worker as an approximate owner of the request's
// whole prefix (the next request that extends it finds it there) and tells
// the router what the decision matched (the leading blocks the chosen
// worker was found to hold) and what to withdraw if the request fails.
func (p *CacheAware) record(prefix []uint64, worker string, s *Scratch, matched int) {
	s.Matched, s.Stamp = matched, p.index.Record(prefix, worker, KindApproximate, s.Now, 0)
}

// ownerPressure is a candidate's pressure and whether it is known. Without
// fresh telemetry the floor this gateway knows for certain still counts,
// its own in-flight requests over the worker's capacity; with no capacity
// either, the pressure is unknown (and fails open).
func ownerPressure(c *Candidate) (float64, bool) {
	if pr, ok := c.Pressure(); ok {
		return pr, true
	}
	if c.Load.MaxRunning > 0 {
		return float64(c.InflightReqs) / float64(c.Load.MaxRunning), true
	}
	return 0, false
}

// lessReserved orders suitable owners: less work reserved since the last
// sample first, then lower pressure, then less in-flight work.
func lessReserved(a *Candidate, pa float64, b *Candidate, pb float64) bool {
	if a.ReservedTokens != b.ReservedTokens {
		return a.ReservedTokens < b.ReservedTokens
	}
	if pa != pb {
		return pa < pb
	}
	return a.InflightTokens < b.InflightTokens
}
