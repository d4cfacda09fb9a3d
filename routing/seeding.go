package routing

import (
	"slices"
	"time"
)

// Decision labels of distribution seeding. A request that would be held on
// full owners either seeds (seed_dispatch) or is held with the reason it did
// not (seed_rejected_*); seed_committed and seed_failed are counted when a
// seed's request ends (Decision.SeedOutcome).
const (
	LabelSeedDispatch          Label = "seed_dispatch"
	LabelSeedCommitted         Label = "seed_committed"
	LabelSeedFailed            Label = "seed_failed"
	LabelSeedRejectedPartition Label = "seed_rejected_partition"
	LabelSeedRejectedStreaming Label = "seed_rejected_streaming"
	LabelSeedRejectedFanout    Label = "seed_rejected_fanout"
	LabelSeedRejectedInFlight  Label = "seed_rejected_in_flight"
	LabelSeedRejectedCooldown  Label = "seed_rejected_cooldown"
	LabelSeedRejectedCap       Label = "seed_rejected_cap"
	LabelSeedRejectedTelemetry Label = "seed_rejected_telemetry"
	LabelSeedRejectedNoPeer    Label = "seed_rejected_no_clean_peer"
	LabelSeedRejectedProof     Label = "seed_rejected_proof"
	// LabelSeedRejectedIdentity is counted by the gateway when the seed's
	// worker changed (generation or revision) between the decision and the
	// dispatch: the lease fails closed.
	LabelSeedRejectedIdentity Label = "seed_rejected_identity"
)

// SeedLease binds a distribution seed to one incarnation of one worker, for
// one model, partition and prefix. The gateway re-verifies the binding just
// before dispatch (the decision's Endpoint carries id, generation and
// revision); a replaced worker aborts the seed.
type SeedLease struct {
	Worker     string
	Generation uint64
	Revision   uint64
	Model      string
	Partition  string
	Prefix     uint64   // the owners' prefix: the deepest block they hold
	blocks     []uint64 // the request's whole chain, to commit ownership of
	stamp      Stamp    // what the seed recorded: withdrawn on failure, committed on success
}

// seeding is cache_aware's seeding bookkeeping, used under the router's lock.
type seeding struct {
	cfg        SeedingConfig
	inflight   map[string]int                  // partition → seeds in flight
	quarantine map[uint64]map[string]time.Time // prefix block → worker → until
}

func newSeeding(cfg SeedingConfig) *seeding {
	return &seeding{cfg: cfg, inflight: map[string]int{}, quarantine: map[uint64]map[string]time.Time{}}
}

func (sd *seeding) allows(partition string) bool {
	return slices.Contains(sd.cfg.Partitions, AnyPartition) || slices.Contains(sd.cfg.Partitions, partition)
}

// barred appends to dst the workers quarantined for any block of chain: a
// request's whole chain holds the prefix a seed failed on when the request is
// that prefix or a descendant of it, however much of it is matched today.
func (sd *seeding) barred(chain []uint64, now time.Time, dst []string) []string {
	if len(sd.quarantine) == 0 {
		return dst
	}
	for _, h := range chain {
		for w, until := range sd.quarantine[h] {
			if now.Before(until) && !slices.Contains(dst, w) {
				dst = append(dst, w)
			}
		}
	}
	return dst
}

// quarantineFor bars worker from prefix and its descendants until until,
// first dropping every lapsed quarantine: the map holds only the failures of
// the last FailureQuarantine.
func (sd *seeding) quarantineFor(prefix uint64, worker string, now, until time.Time) {
	for h, ws := range sd.quarantine {
		for w, u := range ws {
			if !now.Before(u) {
				delete(ws, w)
			}
		}
		if len(ws) == 0 {
			delete(sd.quarantine, h)
		}
	}
	if sd.quarantine[prefix] == nil {
		sd.quarantine[prefix] = map[string]time.Time{}
	}
	sd.quarantine[prefix][worker] = until
}

// issuableHeadroom is a worker's free request slots from complete telemetry
// no older than maxAge, minus what was reserved since; ok false when the
// telemetry cannot say (stale, incomplete, capacity unknown): seeding fails
// closed on it.
func issuableHeadroom(c *Candidate, now time.Time, maxAge time.Duration) (int, bool) {
	if !c.Load.Fresh(now, maxAge) || c.Load.MaxRunning <= 0 {
		return 0, false
	}
	return c.Load.Headroom(true, c.ReservedReqs), true
}

// trySeed is called when the ordinary path would hold the request on a full
// owner. It checks every condition read-only, then claims the request's
// admission proof, and only then takes the lease. It returns the chosen
// candidate, or -1 and the reason for the refusal.
func (p *CacheAware) trySeed(req *Request, key uint64, matched int, prot *prefixProtection, cands []Candidate, s *Scratch) (int, Label) {
	sd := p.seeding
	switch {
	case !sd.allows(req.Partition):
		return -1, LabelSeedRejectedPartition
	case req.Stream:
		return -1, LabelSeedRejectedStreaming
	case !req.SingleTarget:
		return -1, LabelSeedRejectedFanout
	}
	switch prot.current(s.Now) {
	case SeedInFlight:
		return -1, LabelSeedRejectedInFlight
	case SeedCooldown:
		return -1, LabelSeedRejectedCooldown
	case SpillCooling:
		return -1, LabelSpillCoalesced // a cooling spill is the prefix's one expansion
	}
	if sd.inflight[req.Partition] >= sd.cfg.PartitionSeedCap {
		return -1, LabelSeedRejectedCap
	}
	// A clean peer: not an owner (and not quarantined for this prefix: Select
	// took those out of cands), with issuable headroom from complete, fresh
	// telemetry. The freest one wins (ties: the first), so the choice needs
	// no randomness.
	best, bestRoom, sawStale := -1, 0, false
	for i := range cands {
		if p.isOwner(i) {
			continue
		}
		room, ok := issuableHeadroom(&cands[i], s.Now, sd.cfg.MaxAge)
		if !ok {
			sawStale = true
			continue
		}
		if room > bestRoom {
			best, bestRoom = i, room
		}
	}
	if best < 0 {
		if sawStale {
			return -1, LabelSeedRejectedTelemetry
		}
		return -1, LabelSeedRejectedNoPeer
	}
	// Every check passed without touching anything: now the one-shot proof.
	if req.Proof == nil || req.Proof.Claim() != nil {
		return -1, LabelSeedRejectedProof
	}
	c := &cands[best]
	lease := &SeedLease{Worker: c.ID, Generation: c.Generation, Revision: c.Revision, Model: req.Model,
		Partition: req.Partition, Prefix: key, blocks: req.Prefix}
	prot.seed(lease, s.Now)
	p.spills.put(key, prot, s.Now)
	sd.inflight[req.Partition]++
	lease.stamp = p.index.Record(req.Prefix, c.ID, KindSeeding, s.Now, 0)
	s.Lease = lease
	return best, LabelSeedDispatch
}

// endSeed is a seed's request ending (under the router's lock): a success
// commits the peer as an owner of the whole prefix and cools the prefix
// down; anything else withdraws the seed, and a failure quarantines the
// peer for the prefix and its descendants.
func (p *CacheAware) endSeed(lease *SeedLease, o Outcome, now time.Time) {
	sd := p.seeding
	sd.inflight[lease.Partition]--
	if sd.inflight[lease.Partition] <= 0 {
		delete(sd.inflight, lease.Partition)
	}
	prot, _ := p.spills.peek(lease.Prefix)
	switch o {
	case OutcomeSuccess:
		p.index.Commit(lease.blocks, lease.stamp, now)
		if prot != nil {
			prot.endSeed(lease, true, now.Add(sd.cfg.SuccessCooldown))
		}
	default:
		p.index.Withdraw(lease.blocks, lease.stamp)
		if prot != nil {
			prot.endSeed(lease, false, now)
		}
		if o == OutcomeFailure {
			sd.quarantineFor(lease.Prefix, lease.Worker, now, now.Add(sd.cfg.FailureQuarantine))
		}
	}
}

// Seeding reports whether the policy may seed clean workers.
func (p *CacheAware) Seeding() bool { return p.seeding != nil }

// SeedsInFlight is how many seeds a partition has in flight. It reads the
// policy's state without the router's lock: call it only when no routing
// runs (tests, simulations).
func (p *CacheAware) SeedsInFlight(partition string) int {
	if p.seeding == nil {
		return 0
	}
	return p.seeding.inflight[partition]
}
