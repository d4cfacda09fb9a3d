package sim

// KV accounting. A running request holds every block it will ever need from
// its admission on: its cached prefix (pinned cache blocks) plus private blocks
// for the rest of its prompt and its output. As its prompt is scheduled for
// prefill, each full prompt block turns from private into a pinned cache block
// under its hash, as vLLM caches a block when it schedules it: a request
// admitted later, even in the same step, finds it.
//
//	used   = private + cached (pinned or evictable) ≤ capacity
//	usage  = (private + pinned) / capacity          (what engines report)

func blocksFor(tokens, blockTokens int) int {
	return (tokens + blockTokens - 1) / blockTokens
}

// allocate reserves r's blocks if they fit, evicting least recently used
// unpinned blocks as needed, and records its cached prefix. It reports false,
// changing nothing, when even evicting every unpinned block leaves too little
// room.
func (e *Engine) allocate(r *request) bool {
	bt := e.cfg.BlockTokens
	total := blocksFor(r.PromptTokens+r.OutputTokens, bt)
	// The last prompt token is always computed, as in vLLM, so that the
	// request has logits to sample its first token from: a prompt entirely in
	// cache still prefills its last block.
	maxMatch := min(r.hashableBlocks(bt), (r.PromptTokens-1)/bt)
	evictableMatched := 0
	r.slots = r.slots[:0]
	for _, h := range r.BlockHashes[:maxMatch] {
		slot, ok := e.cache.lookup(h)
		if !ok {
			break
		}
		if e.cache.isEvictable(slot) {
			evictableMatched++
		}
		r.slots = append(r.slots, slot)
	}
	matched := len(r.slots)
	need := total - matched
	// Room: free blocks plus the evictable ones, less those this request
	// is about to pin.
	room := e.capacityBlocks - e.private - e.cache.len() + e.cache.evictable - evictableMatched
	if need > room {
		r.slots = r.slots[:0]
		return false
	}
	for _, slot := range r.slots {
		e.cache.pin(slot)
	}
	for e.capacityBlocks-e.private-e.cache.len() < need {
		e.cache.evictLRU()
	}
	r.private = need
	e.private += need
	r.cachedTokens = matched * bt
	r.computed = r.cachedTokens
	e.queryTokens += uint64(r.PromptTokens)
	e.hitTokens += uint64(r.cachedTokens)
	return true
}

// cacheScheduled turns r's full prompt blocks covered by its scheduled
// prefill into cache blocks. A hash already cached (computed concurrently by
// another request, or a later block that outlived its evicted prefix) is
// shared rather than duplicated, and r's private block for it is freed.
func (e *Engine) cacheScheduled(r *request) {
	bt := e.cfg.BlockTokens
	upto := min(r.hashableBlocks(bt), r.computed/bt)
	for k := len(r.slots); k < upto; k++ {
		h := r.BlockHashes[k]
		slot, ok := e.cache.lookup(h)
		if ok {
			e.cache.pin(slot)
		} else {
			slot = e.cache.insertPinned(h)
		}
		r.slots = append(r.slots, slot)
		r.private--
		e.private--
		e.kvVersion++
	}
}

// release unpins r's blocks and frees its private ones. Blocks go back to the
// LRU list last block first, so a prompt's tail is evicted before its prefix
// (vLLM frees in the same order for the same reason: a prefix is worth more
// than its continuation).
func (e *Engine) release(r *request) {
	for i := len(r.slots) - 1; i >= 0; i-- {
		e.cache.unpin(r.slots[i])
	}
	r.slots = r.slots[:0]
	e.private -= r.private
	r.private = 0
	e.kvVersion++
}
