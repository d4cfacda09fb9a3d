package routing

// Decision labels of sglang_cache_aware.
const (
	LabelSGLangBalance   Label = "sglang_balance"
	LabelSGLangCacheHit  Label = "sglang_cache_hit"
	LabelSGLangCacheMiss Label = "sglang_cache_miss"
)

// SGLangCacheAware is the classic approximate-tree policy of SGLang's
// router, for comparison: when in-flight counts are imbalanced (max − min
// above BalanceAbs and max above min × BalanceRel) the least-loaded worker
// takes the request; otherwise the owner of the longest cached match takes
// it if its match rate exceeds CacheThreshold, else the worker with the
// smallest cache. As in SGLang's tree, a match returns one owner of the
// deepest matched node, the first of its tenant map: stable and arbitrary,
// not the least loaded. Load is measured only in request counts, and only
// the fleet-wide imbalance moves traffic off a hot prefix: the incident's
// shape (one worker 64+ requests ahead of its idle peers).
type SGLangCacheAware struct {
	cfg   PolicyConfig
	index *Index
	scr   []Owner
	ids   []string
}

var _ Policy = (*SGLangCacheAware)(nil)

// NewSGLangCacheAware returns the policy with its own index.
func NewSGLangCacheAware(cfg PolicyConfig, index *Index) *SGLangCacheAware {
	return &SGLangCacheAware{cfg: cfg, index: index}
}

// Name implements Policy.
func (*SGLangCacheAware) Name() string { return "sglang_cache_aware" }

// Index is the policy's ownership index.
func (p *SGLangCacheAware) Index() *Index { return p.index }

// Select implements Policy.
func (p *SGLangCacheAware) Select(req *Request, cands []Candidate, s *Scratch) (int, Label) {
	lo, hi := 0, 0
	for i := range cands {
		if cands[i].InflightReqs < cands[lo].InflightReqs {
			lo = i
		}
		if cands[i].InflightReqs > cands[hi].InflightReqs {
			hi = i
		}
	}
	minLoad, maxLoad := cands[lo].InflightReqs, cands[hi].InflightReqs
	if maxLoad-minLoad > p.cfg.BalanceAbs && float64(maxLoad) > float64(minLoad)*p.cfg.BalanceRel {
		p.record(req.Prefix, cands[lo].ID, s, 0)
		return lo, LabelSGLangBalance
	}
	if len(req.Prefix) > 0 {
		p.ids = p.ids[:0]
		for i := range cands {
			p.ids = append(p.ids, cands[i].ID)
		}
		matched, owners := p.index.Match(req.Prefix, s.Now, p.ids, p.scr[:0])
		p.scr = owners
		if float64(matched)/float64(len(req.Prefix)) > p.cfg.CacheThreshold {
			for _, o := range owners { // the first owner that can take it
				if i := indexOf(cands, o.Worker); i >= 0 {
					p.record(req.Prefix, cands[i].ID, s, matched)
					return i, LabelSGLangCacheHit
				}
			}
		}
	}
	smallest := 0
	for i := range cands {
		if p.index.WorkerBlocks(cands[i].ID) < p.index.WorkerBlocks(cands[smallest].ID) {
			smallest = i
		}
	}
	p.record(req.Prefix, cands[smallest].ID, s, 0)
	return smallest, LabelSGLangCacheMiss
}

// record inserts the request's prefix into the chosen worker's tree, as
// SGLang does on every decision.
func (p *SGLangCacheAware) record(prefix []uint64, worker string, s *Scratch, matched int) {
	s.Matched, s.Stamp = matched, p.index.Record(prefix, worker, KindApproximate, s.Now, 0)
}
