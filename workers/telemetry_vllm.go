package workers

import (
	"maps"
	"slices"
)

// vLLM exports one series per data-parallel engine, labelled engine="<rank>"
// (and model_name); a single-engine or older server has no engine label.
const (
	vllmRankLabel      = "engine"
	vllmRunning        = "vllm:num_requests_running"
	vllmWaiting        = "vllm:num_requests_waiting"
	vllmKVUsage        = "vllm:kv_cache_usage_perc"
	vllmKVUsageOld     = "vllm:gpu_cache_usage_perc" // before the V1 engine renamed it
	vllmPrefixHits     = "vllm:prefix_cache_hits_total"
	vllmPrefixQueries  = "vllm:prefix_cache_queries_total"
	vllmMaxRunningNone = "" // vLLM does not export max_num_seqs
)

// ParseVLLMMetrics reads a vLLM /metrics body (Prometheus text). Running and
// waiting are required; KV usage comes from vllm:kv_cache_usage_perc or, on
// older servers, vllm:gpu_cache_usage_perc (-1 when neither is there).
// expectedRanks > 0 is the data-parallel size the sample must cover to be
// complete; 0 takes the engines present as all there are.
func ParseVLLMMetrics(body []byte, expectedRanks int) (Sample, error) {
	p, err := telemetryParseText(body)
	if err != nil {
		return Sample{}, err
	}
	kv := vllmKVUsage
	if !p.has(kv) {
		kv = vllmKVUsageOld
	}
	ranks, err := telemetryTextLoad(p, vllmRankLabel, vllmRunning, vllmWaiting, kv, vllmMaxRunningNone)
	if err != nil {
		return Sample{}, err
	}
	s, err := telemetrySample(ranks, expectedRanks, SourceVLLMMetrics)
	if err != nil {
		return Sample{}, err
	}
	if s.PrefixCacheHits, err = vllmCounterSum(p, vllmPrefixHits); err != nil {
		return Sample{}, err
	}
	if s.PrefixCacheQueries, err = vllmCounterSum(p, vllmPrefixQueries); err != nil {
		return Sample{}, err
	}
	return s, nil
}

// vllmCounterSum is a cumulative counter summed over engines (0 when absent).
func vllmCounterSum(p telemetryText, name string) (float64, error) {
	perRank, err := p.byRank(name, vllmRankLabel)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, id := range slices.Sorted(maps.Keys(perRank)) { // a fixed order keeps float sums repeatable
		sum += perRank[id]
	}
	return sum, nil
}
