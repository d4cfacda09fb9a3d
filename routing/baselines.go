package routing

import "github.com/zeebo/xxh3"

// RoundRobin cycles through the candidates, blind to load and cache.
type RoundRobin struct{ next uint64 }

var _ Policy = (*RoundRobin)(nil)

// Name implements Policy.
func (*RoundRobin) Name() string { return "round_robin" }

// Select implements Policy.
func (p *RoundRobin) Select(_ *Request, cands []Candidate, _ *Scratch) (int, Label) {
	i := int(p.next % uint64(len(cands)))
	p.next++
	return i, LabelRoundRobin
}

// Random picks a candidate uniformly at random.
type Random struct{}

var _ Policy = Random{}

// Name implements Policy.
func (Random) Name() string { return "random" }

// Select implements Policy.
func (Random) Select(_ *Request, cands []Candidate, s *Scratch) (int, Label) {
	return s.Rand.IntN(len(cands)), LabelRandom
}

// LeastLoad is size-aware power of two choices: sample two candidates, take
// the one with less outstanding work in tokens. Two random choices keep
// stale telemetry from herding every request onto one "least loaded" worker,
// while nearly matching the balance of a full scan.
type LeastLoad struct {
	avg avgWork
}

var _ Policy = (*LeastLoad)(nil)

// Name implements Policy.
func (*LeastLoad) Name() string { return "least_load" }

// Select implements Policy.
func (p *LeastLoad) Select(_ *Request, cands []Candidate, s *Scratch) (int, Label) {
	avg := p.avg.observe(s.Work)
	return PowerOfTwo(cands, s, avg), LabelLeastLoad
}

// PowerOfTwo returns the index of the less loaded of two distinct random
// candidates, or the only one. Two candidates with fresh telemetry compare
// by WorkTokens (their whole queue, other gateways' traffic included); a
// pair where either lacks fresh telemetry compares by this gateway's own
// in-flight work, the one measure both have, so a worker whose telemetry
// never turns fresh does not look emptiest: unknown is never headroom.
func PowerOfTwo(cands []Candidate, s *Scratch, avgWork int) int {
	n := len(cands)
	if n == 1 {
		return 0
	}
	a := s.Rand.IntN(n)
	b := s.Rand.IntN(n - 1)
	if b >= a {
		b++
	}
	return lighter(cands, a, b, avgWork)
}

// hashedTwoChoices is PowerOfTwo over the two candidates a hash of key
// ranks first (rendezvous hashing on key and worker id) instead of two drawn
// at random: cache_aware's cold placement with routing.cold_placement
// hashed. Every gateway replica keeps its own index, so random choices send
// a prompt's requests to different workers on different replicas and their
// caches never meet; hashed ones make every replica weigh the same two
// workers for the same prompt (key: its deepest block), and with the same
// telemetry pick the same one. The two-choice bound on load holds for hashed
// choices as for random ones.
func hashedTwoChoices(cands []Candidate, key uint64, avgWork int) int {
	if len(cands) == 1 {
		return 0
	}
	a, b := -1, -1
	var sa, sb uint64
	for i := range cands {
		score := xxh3.HashStringSeed(cands[i].ID, key)
		switch {
		case a < 0 || score > sa:
			b, sb = a, sa
			a, sa = i, score
		case b < 0 || score > sb:
			b, sb = i, score
		}
	}
	return lighter(cands, a, b, avgWork)
}

// lighter is the one of candidates a and b with less outstanding work (a on
// a tie), as PowerOfTwo compares them.
func lighter(cands []Candidate, a, b, avgWork int) int {
	wa, wb := cands[a].InflightTokens, cands[b].InflightTokens
	if cands[a].Fresh && cands[b].Fresh {
		wa, wb = cands[a].WorkTokens(avgWork), cands[b].WorkTokens(avgWork)
	}
	if wb < wa {
		return b
	}
	return a
}

// avgWork is a moving average of requests' estimated work, used to turn a
// worker's request counts into tokens.
type avgWork struct{ v float64 }

func (a *avgWork) observe(work int) int {
	if a.v == 0 {
		a.v = float64(work)
	} else {
		a.v += (float64(work) - a.v) / 64
	}
	return max(int(a.v), 1)
}
