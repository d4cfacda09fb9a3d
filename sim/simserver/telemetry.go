package simserver

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/goccy/go-json"
	"github.com/prometheus/client_golang/prometheus"
)

// LoadOverride replaces what the telemetry endpoints (/metrics, /get_load,
// /v1/loads) report, so a test can make a worker look full or idle; the
// engine's real scheduling is unaffected. A nil field is not overridden.
type LoadOverride struct {
	Running *int     `json:"running,omitempty"`
	Waiting *int     `json:"waiting,omitempty"`
	KVUsage *float64 `json:"kv_usage,omitempty"`
}

// reported is the load the worker tells the world about.
type reported struct {
	running, waiting       int
	maxRunning             int
	kvUsage                float64
	usedTokens             int
	capacityTokens         int
	waitingPromptTokens    int
	blockTokens            int
	capacityBlocks         int
	hitTokens, queryTokens uint64
}

func (s *Server) reportedLoad() reported {
	snap := s.Snapshot()
	r := reported{
		running:             snap.Running,
		waiting:             snap.Waiting,
		maxRunning:          snap.MaxRunning,
		kvUsage:             snap.KVUsage,
		usedTokens:          snap.KVUsedBlocks * snap.BlockTokens,
		capacityTokens:      snap.KVCapacityBlocks * snap.BlockTokens,
		waitingPromptTokens: snap.WaitingPromptTokens,
		blockTokens:         snap.BlockTokens,
		capacityBlocks:      snap.KVCapacityBlocks,
		hitTokens:           snap.PrefixCacheHits,
		queryTokens:         snap.PrefixCacheQueries,
	}
	if o := s.override.Load(); o != nil {
		if o.Running != nil {
			r.running = *o.Running
		}
		if o.Waiting != nil {
			r.waiting = *o.Waiting
		}
		if o.KVUsage != nil {
			r.kvUsage = *o.KVUsage
			r.usedTokens = int(math.Round(*o.KVUsage * float64(r.capacityTokens)))
		}
	}
	return r
}

// SetLoadOverride makes the telemetry endpoints report o; nil clears it.
func (s *Server) SetLoadOverride(o *LoadOverride) error {
	if o != nil {
		if err := o.validate(); err != nil {
			return err
		}
		c := *o
		o = &c
	}
	s.override.Store(o)
	return nil
}

func (o LoadOverride) validate() error {
	if o.Running != nil && *o.Running < 0 {
		return invalid("running", "must not be negative")
	}
	if o.Waiting != nil && *o.Waiting < 0 {
		return invalid("waiting", "must not be negative")
	}
	if o.KVUsage != nil && !(*o.KVUsage >= 0 && *o.KVUsage <= 1) {
		return invalid("kv_usage", "must be within [0, 1]")
	}
	return nil
}

// engineCollector renders the engine's load as vLLM names it, read at scrape
// time. Labels follow vLLM V1: model_name (the first served model) and engine
// (the DP engine index, always "0" here).
type engineCollector struct{ s *Server }

var (
	labels             = []string{"model_name", "engine"}
	descRunning        = prometheus.NewDesc("vllm:num_requests_running", "Number of requests in model execution batches.", labels, nil)
	descWaiting        = prometheus.NewDesc("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, nil)
	descKVUsage        = prometheus.NewDesc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, nil)
	descPrefixHits     = prometheus.NewDesc("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", labels, nil)
	descPrefixQueries  = prometheus.NewDesc("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", labels, nil)
	descCacheConfig    = prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", []string{"block_size", "num_gpu_blocks"}, nil)
	engineCollectorAll = []*prometheus.Desc{descRunning, descWaiting, descKVUsage, descPrefixHits, descPrefixQueries, descCacheConfig}
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range engineCollectorAll {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.s.reportedLoad()
	model := c.s.cfg.Models[0]
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(r.running), model, "0")
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(r.waiting), model, "0")
	ch <- prometheus.MustNewConstMetric(descKVUsage, prometheus.GaugeValue, r.kvUsage, model, "0")
	ch <- prometheus.MustNewConstMetric(descPrefixHits, prometheus.CounterValue, float64(r.hitTokens), model, "0")
	ch <- prometheus.MustNewConstMetric(descPrefixQueries, prometheus.CounterValue, float64(r.queryTokens), model, "0")
	ch <- prometheus.MustNewConstMetric(descCacheConfig, prometheus.GaugeValue, 1,
		strconv.Itoa(r.blockTokens), strconv.Itoa(r.capacityBlocks))
}

// SGLang's /get_load: one object per DP rank. As SGLang's scheduler counts
// them, num_reqs includes the waiting requests and num_tokens adds the
// waiting prompts to the KV tokens in use.
type wireGetLoad struct {
	DPRank         int     `json:"dp_rank"`
	NumReqs        int     `json:"num_reqs"`
	NumWaitingReqs int     `json:"num_waiting_reqs"`
	NumTokens      int     `json:"num_tokens"`
	TSTic          float64 `json:"ts_tic"`
}

func (s *Server) serveGetLoad(w http.ResponseWriter, _ *http.Request) {
	r := s.reportedLoad()
	writeJSON(w, []wireGetLoad{{
		NumReqs:        r.running + r.waiting,
		NumWaitingReqs: r.waiting,
		NumTokens:      r.usedTokens + r.waitingPromptTokens,
		TSTic:          float64(time.Now().UnixNano()) / 1e9,
	}})
}

// SGLang's newer /v1/loads. dp_rank_count is kept although recent SGLang
// dropped it: readers must not depend on it either way.
type wireLoads struct {
	Timestamp   string         `json:"timestamp"`
	Version     string         `json:"version"`
	DPRankCount int            `json:"dp_rank_count"`
	Loads       []wireRankLoad `json:"loads"`
}

type wireRankLoad struct {
	DPRank                   int     `json:"dp_rank"`
	NumRunningReqs           int     `json:"num_running_reqs"`
	NumWaitingReqs           int     `json:"num_waiting_reqs"`
	NumWaitingUncachedTokens int     `json:"num_waiting_uncached_tokens"`
	NumUsedTokens            int     `json:"num_used_tokens"`
	NumTotalTokens           int     `json:"num_total_tokens"`
	MaxTotalNumTokens        int     `json:"max_total_num_tokens"`
	MaxRunningRequests       int     `json:"max_running_requests"`
	TokenUsage               float64 `json:"token_usage"`
	GenThroughput            float64 `json:"gen_throughput"`
	CacheHitRate             float64 `json:"cache_hit_rate"`
	Utilization              float64 `json:"utilization"`
}

// Version is what /v1/loads reports as the engine version.
const Version = "kvgate-enginesim"

func (s *Server) serveLoads(w http.ResponseWriter, _ *http.Request) {
	r := s.reportedLoad()
	hitRate := 0.0
	if r.queryTokens > 0 {
		hitRate = float64(r.hitTokens) / float64(r.queryTokens)
	}
	writeJSON(w, wireLoads{
		Timestamp:   time.Now().UTC().Format(time.RFC3339Nano),
		Version:     Version,
		DPRankCount: 1,
		Loads: []wireRankLoad{{
			NumRunningReqs: r.running,
			NumWaitingReqs: r.waiting,
			// The engine does not look waiting prompts up in the cache
			// before admission: all of them count as uncached.
			NumWaitingUncachedTokens: r.waitingPromptTokens,
			NumUsedTokens:            r.usedTokens,
			NumTotalTokens:           r.usedTokens + r.waitingPromptTokens,
			MaxTotalNumTokens:        r.capacityTokens,
			MaxRunningRequests:       r.maxRunning,
			TokenUsage:               math.Round(r.kvUsage*1e4) / 1e4,
			CacheHitRate:             math.Round(hitRate*1e4) / 1e4,
		}},
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, apiError{status: http.StatusInternalServerError, typ: "server_error", msg: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
