package sim

import "time"

// Snapshot is the telemetry an engine reports about itself, taken at the
// engine's current time (call Advance first to bring it to a given time).
type Snapshot struct {
	At         time.Duration
	Running    int
	Waiting    int
	MaxRunning int
	// KVUsage is the fraction of the cache held by running requests, 0..1:
	// evictable cached blocks count as free, as in vLLM's
	// kv_cache_usage_perc.
	KVUsage float64
	// KVUsedBlocks are the blocks held by running requests; KVCachedBlocks
	// the evictable blocks kept for reuse; KVCapacityBlocks the whole cache.
	KVUsedBlocks     int
	KVCachedBlocks   int
	KVCapacityBlocks int
	BlockTokens      int
	// WaitingPromptTokens is the prompt tokens of the waiting queue, for
	// SGLang-style load figures.
	WaitingPromptTokens int
	// PrefixCacheQueries and PrefixCacheHits are cumulative prompt tokens
	// looked up in the cache at admission and found there, as vLLM's
	// prefix_cache_queries_total and prefix_cache_hits_total.
	PrefixCacheQueries uint64
	PrefixCacheHits    uint64
}

// Snapshot reports the engine's telemetry now.
func (e *Engine) Snapshot() Snapshot {
	used := e.private + e.cache.pinned
	return Snapshot{
		At:                  e.clock,
		Running:             len(e.running),
		Waiting:             e.waiting.len(),
		MaxRunning:          e.cfg.MaxRunning,
		KVUsage:             float64(used) / float64(e.capacityBlocks),
		KVUsedBlocks:        used,
		KVCachedBlocks:      e.cache.evictable,
		KVCapacityBlocks:    e.capacityBlocks,
		BlockTokens:         e.cfg.BlockTokens,
		WaitingPromptTokens: e.waitingPromptTokens,
		PrefixCacheQueries:  e.queryTokens,
		PrefixCacheHits:     e.hitTokens,
	}
}

// RequestInfo is where one request stands.
type RequestInfo struct {
	Phase        Phase
	PromptTokens int
	OutputTokens int
	// CachedTokens is the prefix found in the cache at admission; 0 while
	// waiting.
	CachedTokens int
	// Generated is the tokens emitted so far.
	Generated int
}

// Request reports where the request id stands; false once it finished, was
// cancelled, or was never submitted.
func (e *Engine) Request(id uint64) (RequestInfo, bool) {
	r, ok := e.byID[id]
	if !ok {
		return RequestInfo{}, false
	}
	return RequestInfo{
		Phase:        r.phase,
		PromptTokens: r.PromptTokens,
		OutputTokens: r.OutputTokens,
		CachedTokens: r.cachedTokens,
		Generated:    r.generated,
	}, true
}
