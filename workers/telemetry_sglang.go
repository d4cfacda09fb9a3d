package workers

import (
	"bytes"
	"math"

	json "github.com/goccy/go-json"
)

// SGLang reports load three ways, newest first: /v1/loads, /get_load (older,
// and a deprecated shim over /v1/loads in newer servers) and /metrics.
// Numbers arrive as ints or floats depending on the version and serializer,
// and optional fields may be null; unknown fields are ignored.

// sglangLoads is the /v1/loads body. Its top-level timestamp is an ISO
// string while each rank's is a float; neither is read.
type sglangLoads struct {
	DPRankCount *float64          `json:"dp_rank_count"`
	Loads       *[]sglangRankLoad `json:"loads"`
}

type sglangRankLoad struct {
	DPRank             *float64 `json:"dp_rank"`
	NumRunningReqs     *float64 `json:"num_running_reqs"`
	NumWaitingReqs     *float64 `json:"num_waiting_reqs"`
	NumUsedTokens      *float64 `json:"num_used_tokens"`
	MaxTotalNumTokens  *float64 `json:"max_total_num_tokens"`
	TokenUsage         *float64 `json:"token_usage"`
	MaxRunningRequests *float64 `json:"max_running_requests"`
}

// ParseSGLangLoads reads an SGLang /v1/loads body. The sample is complete
// when it covers expectedRanks ranks (when > 0), else dp_rank_count.
func ParseSGLangLoads(body []byte, expectedRanks int) (Sample, error) {
	var doc sglangLoads
	if err := json.Unmarshal(body, &doc); err != nil {
		return Sample{}, telemetryErrorf("sglang /v1/loads: %v", err)
	}
	if doc.Loads == nil {
		return Sample{}, telemetryErrorf("sglang /v1/loads: no loads")
	}
	expected := expectedRanks
	if doc.DPRankCount != nil && expected <= 0 {
		n, err := telemetryCount("dp_rank_count", *doc.DPRankCount)
		if err != nil {
			return Sample{}, err
		}
		expected = n
	}
	ranks := map[int]RankLoad{}
	for i, l := range *doc.Loads {
		if l.NumRunningReqs == nil || l.NumWaitingReqs == nil {
			return Sample{}, telemetryErrorf("sglang /v1/loads: rank entry %d lacks request counts", i)
		}
		id, err := sglangRankID(l.DPRank, i, ranks)
		if err != nil {
			return Sample{}, err
		}
		r := RankLoad{Rank: id, KVUsage: -1}
		if r.Running, err = telemetryCount("num_running_reqs", *l.NumRunningReqs); err != nil {
			return Sample{}, err
		}
		if r.Waiting, err = telemetryCount("num_waiting_reqs", *l.NumWaitingReqs); err != nil {
			return Sample{}, err
		}
		// token_usage is the fullest of SGLang's token pools (KV, SWA,
		// mamba): the one that stops admission, which is what pressure means.
		switch {
		case l.TokenUsage != nil:
			if r.KVUsage, err = telemetryUsage("token_usage", *l.TokenUsage); err != nil {
				return Sample{}, err
			}
		case l.NumUsedTokens != nil && l.MaxTotalNumTokens != nil && *l.MaxTotalNumTokens > 0:
			if r.KVUsage, err = telemetryUsage("num_used_tokens/max_total_num_tokens", *l.NumUsedTokens / *l.MaxTotalNumTokens); err != nil {
				return Sample{}, err
			}
		}
		if l.MaxRunningRequests != nil {
			if r.MaxRunning, err = telemetryCount("max_running_requests", *l.MaxRunningRequests); err != nil {
				return Sample{}, err
			}
		}
		ranks[id] = r
	}
	return telemetrySample(ranks, expected, SourceSGLangLoads)
}

// sglangGetLoad is one rank of a /get_load body.
type sglangGetLoad struct {
	DPRank         *float64 `json:"dp_rank"`
	NumReqs        *float64 `json:"num_reqs"` // running + waiting
	NumWaitingReqs *float64 `json:"num_waiting_reqs"`
}

// ParseSGLangGetLoad reads an SGLang /get_load body: an array with one entry
// per rank, or a single object from older servers. num_reqs counts running
// and waiting requests together. It reports no KV usage. The oldest servers
// answer {"load": <tokens>}, which has no request counts and is rejected.
func ParseSGLangGetLoad(body []byte, expectedRanks int) (Sample, error) {
	var entries []sglangGetLoad
	var err error
	switch trimmed := bytes.TrimLeft(body, " \t\r\n"); {
	case len(trimmed) > 0 && trimmed[0] == '[':
		err = json.Unmarshal(body, &entries)
	case len(trimmed) > 0 && trimmed[0] == '{':
		entries = make([]sglangGetLoad, 1)
		err = json.Unmarshal(body, &entries[0])
	default:
		return Sample{}, telemetryErrorf("sglang /get_load: neither an array nor an object")
	}
	if err != nil {
		return Sample{}, telemetryErrorf("sglang /get_load: %v", err)
	}
	ranks := map[int]RankLoad{}
	for i, l := range entries {
		if l.NumReqs == nil || l.NumWaitingReqs == nil {
			return Sample{}, telemetryErrorf("sglang /get_load: entry %d lacks num_reqs / num_waiting_reqs", i)
		}
		id, err := sglangRankID(l.DPRank, i, ranks)
		if err != nil {
			return Sample{}, err
		}
		total, err := telemetryCount("num_reqs", *l.NumReqs)
		if err != nil {
			return Sample{}, err
		}
		waiting, err := telemetryCount("num_waiting_reqs", *l.NumWaitingReqs)
		if err != nil {
			return Sample{}, err
		}
		ranks[id] = RankLoad{
			Rank:    id,
			Running: max(total-waiting, 0), // both read in one scheduler step; clamp a torn read
			Waiting: waiting,
			KVUsage: -1,
		}
	}
	return telemetrySample(ranks, expectedRanks, SourceSGLangGetLoad)
}

// sglangRankID is an entry's dp_rank, or its position when the server leaves
// the rank out (null or absent). A rank reported twice is garbage.
func sglangRankID(reported *float64, position int, seen map[int]RankLoad) (int, error) {
	id := position
	if reported != nil {
		v := *reported
		if v != math.Trunc(v) || v < math.MinInt32 || v > math.MaxInt32 {
			return 0, telemetryErrorf("dp_rank = %v is not a rank", v)
		}
		var err error
		if id, err = telemetryRank("dp_rank", int64(v)); err != nil {
			return 0, err
		}
	}
	if _, dup := seen[id]; dup {
		return 0, telemetryErrorf("dp_rank %d reported twice", id)
	}
	return id, nil
}

// SGLang's /metrics: one series per scheduler, labelled model_name,
// engine_type, tp_rank, pp_rank, moe_ep_rank, dp_rank (data-parallel servers
// only) and priority="" (priority scheduling only). Only the first
// tensor-parallel scheduler of each rank reports unless
// --enable-metrics-for-all-schedulers, in which case its peers repeat the same
// numbers.
const (
	sglangRankLabel  = "dp_rank"
	sglangRunning    = "sglang:num_running_reqs"
	sglangWaiting    = "sglang:num_queue_reqs"
	sglangKVUsage    = "sglang:token_usage"
	sglangMaxRunning = "sglang:max_running_requests"
)

// ParseSGLangMetrics reads an SGLang /metrics body (Prometheus text).
func ParseSGLangMetrics(body []byte, expectedRanks int) (Sample, error) {
	p, err := telemetryParseText(body)
	if err != nil {
		return Sample{}, err
	}
	ranks, err := telemetryTextLoad(p, sglangRankLabel, sglangRunning, sglangWaiting, sglangKVUsage, sglangMaxRunning)
	if err != nil {
		return Sample{}, err
	}
	return telemetrySample(ranks, expectedRanks, SourceSGLangMetrics)
}
