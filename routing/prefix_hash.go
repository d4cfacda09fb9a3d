package routing

import (
	"encoding/binary"
	"math"
	"slices"
	"sort"

	"github.com/zeebo/xxh3"
)

// LabelPrefixHash is prefix_hash's decision label.
const LabelPrefixHash Label = "prefix_hash"

// ringReplicas is how many points each worker has on the hash ring.
const ringReplicas = 64

// PrefixHash is consistent hashing on the request's first PrefixHashBlocks
// blocks with bounded load: the ring's worker for the prefix takes it unless
// it already has more than ceil(mean in-flight × LoadFactor), in which case
// the next worker clockwise that has room does. Stateless about caches, so
// it is cheap and stable, but blind to how much of a prompt is shared.
type PrefixHash struct {
	cfg     PolicyConfig
	members uint64 // the ring's workers: a hash of their sorted-independent set
	count   int
	ring    []ringPoint
}

type ringPoint struct {
	hash   uint64
	worker string
}

var _ Policy = (*PrefixHash)(nil)

// Name implements Policy.
func (*PrefixHash) Name() string { return "prefix_hash" }

// Select implements Policy.
func (p *PrefixHash) Select(req *Request, cands []Candidate, _ *Scratch) (int, Label) {
	p.rebuild(cands)
	key := ModelSeed(req.Model)
	if n := min(len(req.Prefix), max(p.cfg.PrefixHashBlocks, 1)); n > 0 {
		key = req.Prefix[n-1]
	}
	total := 1
	for i := range cands {
		total += cands[i].InflightReqs
	}
	limit := int(math.Ceil(float64(total) / float64(len(cands)) * p.cfg.LoadFactor))
	start := sort.Search(len(p.ring), func(i int) bool { return p.ring[i].hash >= key })
	first := -1
	for k := range p.ring {
		pt := p.ring[(start+k)%len(p.ring)]
		i := indexOf(cands, pt.worker)
		if first < 0 {
			first = i
		}
		if cands[i].InflightReqs+1 <= limit {
			return i, LabelPrefixHash
		}
	}
	return first, LabelPrefixHash
}

// rebuild recomputes the ring when the candidate set changed. The set is
// compared by an order-independent hash (a sum of the ids' hashes), so an
// unchanged fleet costs one pass and no allocation.
func (p *PrefixHash) rebuild(cands []Candidate) {
	var set uint64
	for i := range cands {
		set += xxh3.HashString(cands[i].ID)
	}
	if set == p.members && len(cands) == p.count && p.ring != nil {
		return
	}
	p.members, p.count = set, len(cands)
	p.ring = p.ring[:0]
	var buf [8]byte
	for i := range cands {
		id := cands[i].ID
		h := xxh3.HashString(id)
		for r := range ringReplicas {
			binary.LittleEndian.PutUint64(buf[:], uint64(r))
			p.ring = append(p.ring, ringPoint{hash: xxh3.HashSeed(buf[:], h), worker: id})
		}
	}
	slices.SortFunc(p.ring, func(a, b ringPoint) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return 0
	})
}

func indexOf(cands []Candidate, id string) int {
	for i := range cands {
		if cands[i].ID == id {
			return i
		}
	}
	return -1
}
