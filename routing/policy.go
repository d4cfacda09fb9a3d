package routing

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Label names why a decision went where it went. The set is bounded: it is a
// metric label.
type Label string

// Labels of the baseline policies.
const (
	LabelRoundRobin Label = "round_robin"
	LabelRandom     Label = "random"
	LabelLeastLoad  Label = "least_load"
)

// Candidate is an endpoint a policy may choose, with the router's view of it.
type Candidate struct {
	Endpoint
	// Fresh: the telemetry sample is complete and recent enough to trust.
	Fresh bool
	// ReservedReqs and ReservedTokens: work dispatched since the sample.
	ReservedReqs   int
	ReservedTokens int
	// InflightReqs and InflightTokens: all work this gateway has
	// outstanding on the worker, from the moment it is routed (a request
	// between its decision and its dispatch counts too).
	InflightReqs   int
	InflightTokens int
}

// Pressure is how full the worker is, 0 (idle) to 1 (full) and beyond:
// max(KV usage, (running + waiting + reserved) / max_running). When the
// capacity is unknown (vLLM does not export max_num_seqs, and no
// max_running hint was configured), a waiting queue alone says the worker is
// full: KV usage counts only running requests, so a worker at its sequence
// cap with a growing queue would otherwise look fine. It is unknown (ok
// false) without fresh telemetry, or with neither a capacity, a KV usage nor
// a queue to judge by.
func (c *Candidate) Pressure() (p float64, ok bool) {
	if !c.Fresh {
		return 0, false
	}
	if u := c.Load.KVUsage; u >= 0 { // negative or NaN: not reported
		p, ok = u, true
	}
	switch {
	case c.Load.MaxRunning > 0:
		p = max(p, float64(c.Load.Running+c.Load.Waiting+c.ReservedReqs)/float64(c.Load.MaxRunning))
		ok = true
	case c.Load.Waiting > 0:
		p = max(p, 1)
		ok = true
	}
	return p, ok
}

// WorkTokens is the candidate's outstanding work in tokens, for size-aware
// comparisons: fresh telemetry's queue (at avgWork tokens a request) plus what
// was reserved since the sample; without fresh telemetry, the gateway's own
// in-flight work. Compare two candidates by it only when both are fresh
// (PowerOfTwo).
func (c *Candidate) WorkTokens(avgWork int) int {
	if c.Fresh {
		return (c.Load.Running+c.Load.Waiting)*avgWork + c.ReservedTokens
	}
	return c.InflightTokens
}

// Scratch carries what a policy may use during one Select: the random
// source and clock (owned by the router) and the request's estimated work.
type Scratch struct {
	Rand *rand.Rand
	Now  time.Time
	Work int // tokens this request reserves
	// Matched is set by prefix-aware policies: the request's leading blocks
	// the chosen worker was found to hold (0 when it held none).
	Matched int
	// Stamp is set by policies that record ownership when they decide: what
	// the record added, withdrawn if the request does not succeed.
	Stamp Stamp
	// Lease is set when the decision is a distribution seed.
	Lease *SeedLease
	// Spill is set when the decision is a pressure spill: the prefix whose
	// one expansion it took, given back if the request does not succeed.
	Spill    uint64
	Spilling bool
}

// seedEnder is a policy that takes seed leases: the router tells it how
// each seed's request ended, under its lock.
type seedEnder interface {
	endSeed(lease *SeedLease, o Outcome, now time.Time)
}

// spillEnder is a policy that spills: the router tells it, under its lock,
// that a spill's request did not succeed.
type spillEnder interface {
	spillFailed(prefix uint64, dest string, now time.Time)
}

// Policy chooses among candidates. Select runs under the router's lock, so
// it must not block; it returns the index of the chosen candidate and the
// decision's label. cands is never empty.
type Policy interface {
	Name() string
	Select(req *Request, cands []Candidate, s *Scratch) (int, Label)
}

// Indexed is a policy that keeps a prefix ownership index.
type Indexed interface {
	Index() *Index
}

// SeedingVariant names cache_aware with distribution seeding enabled.
const SeedingVariant = "cache_aware+seeding"

// AnyPartition in SeedingConfig.Partitions lets every partition seed.
const AnyPartition = "*"

// PolicyNames lists every policy, the default first.
var PolicyNames = []string{"cache_aware", "round_robin", "random", "least_load", "sglang_cache_aware", "prefix_hash"}

// NewPolicy returns the policy with the given config name.
func NewPolicy(name string, cfg PolicyConfig) (Policy, error) {
	switch name {
	case "round_robin":
		return &RoundRobin{}, nil
	case "random":
		return Random{}, nil
	case "least_load":
		return &LeastLoad{}, nil
	case "cache_aware":
		return NewCacheAware(cfg, NewIndex(cfg.IndexMaxBlocks, cfg.IndexTTL)), nil
	case SeedingVariant:
		// cache_aware with seeding on, for side-by-side comparisons (fleetsim):
		// every partition may seed unless cfg names some.
		cfg.Seeding.Enabled = true
		if len(cfg.Seeding.Partitions) == 0 {
			cfg.Seeding.Partitions = []string{AnyPartition}
		}
		return NewCacheAware(cfg, NewIndex(cfg.IndexMaxBlocks, cfg.IndexTTL)), nil
	case "sglang_cache_aware":
		return NewSGLangCacheAware(cfg, NewIndex(cfg.IndexMaxBlocks, cfg.IndexTTL)), nil
	case "prefix_hash":
		return &PrefixHash{cfg: cfg}, nil
	}
	return nil, fmt.Errorf("unknown routing policy %q", name)
}
