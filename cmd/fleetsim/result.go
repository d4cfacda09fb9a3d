package main

import (
	"math"
	"slices"
	"time"
)

// policyResult is one policy's row of the report. Times are in seconds.
type policyResult struct {
	Policy string `json:"policy"`
	// HitRate is the share of admitted prompt tokens served from the prefix
	// cache, from the engines' own counters.
	HitRate float64 `json:"hit_rate"`
	TTFTP50 float64 `json:"ttft_p50"`
	TTFTP90 float64 `json:"ttft_p90"`
	TTFTP99 float64 `json:"ttft_p99"`
	E2EP50  float64 `json:"e2e_p50"`
	E2EP99  float64 `json:"e2e_p99"`
	// ThroughputTokensPerS is output tokens over the makespan, from the
	// first arrival to the last completion.
	ThroughputTokensPerS float64 `json:"throughput_tokens_per_s"`
	// MaxWaiting is the longest waiting queue any worker ever had.
	MaxWaiting int `json:"max_waiting"`
	// Imbalance is max/mean running requests across workers, averaged over
	// the virtual time during which any request ran: 1 is even.
	Imbalance float64 `json:"imbalance"`
	Completed int     `json:"completed"`
	Rejected  int     `json:"rejected"`
	// Decisions counts the router's decision labels.
	Decisions    map[string]int `json:"decisions"`
	PromptTokens int64          `json:"prompt_tokens"` // of admitted requests
	CachedTokens int64          `json:"cached_tokens"`
	OutputTokens int64          `json:"output_tokens"`
	MakespanS    float64        `json:"makespan_s"`
	// Partitions are the tenants' figures, in the workload's order.
	Partitions []partitionResult `json:"partitions"`

	ttft []time.Duration // sorted, for the plot
}

// partitionResult is one tenant's row of a policy's result.
type partitionResult struct {
	Name   string  `json:"name"`
	Weight float64 `json:"weight"`
	// ServedTokens are the prompt and output tokens of its completed
	// requests; ServedShare its part of every partition's.
	ServedTokens int64   `json:"served_tokens"`
	ServedShare  float64 `json:"served_share"`
	TTFTP99      float64 `json:"ttft_p99"` // from arrival, admission's wait included
	Completed    int     `json:"completed"`
	// Rejected counts requests admission refused (queue full, queue
	// timeout), the router refused or no engine could hold.
	Rejected int `json:"rejected"`
}

// result summarises a finished run.
func (f *fleet) result(policy string) policyResult {
	s := f.stats
	slices.Sort(s.ttft)
	slices.Sort(s.e2e)
	hits, queries := f.hitRate()
	r := policyResult{
		Policy:       policy,
		TTFTP50:      round(percentile(s.ttft, 0.50)),
		TTFTP90:      round(percentile(s.ttft, 0.90)),
		TTFTP99:      round(percentile(s.ttft, 0.99)),
		E2EP50:       round(percentile(s.e2e, 0.50)),
		E2EP99:       round(percentile(s.e2e, 0.99)),
		MaxWaiting:   s.maxWaiting,
		Imbalance:    round(s.balance.imbalance()),
		Completed:    s.completed,
		Rejected:     s.rejected,
		Decisions:    make(map[string]int, len(s.decisions)),
		PromptTokens: int64(queries),
		CachedTokens: int64(hits),
		OutputTokens: s.outputTokens,
		ttft:         s.ttft,
	}
	if queries > 0 {
		r.HitRate = round(float64(hits) / float64(queries))
	}
	if s.completed > 0 {
		makespan := (s.lastFinish - f.wl.Requests[0].At).Seconds()
		r.MakespanS = round(makespan)
		if makespan > 0 {
			r.ThroughputTokensPerS = round(float64(s.outputTokens) / makespan)
		}
	}
	for label, n := range s.decisions {
		r.Decisions[string(label)] = n
	}
	var served int64
	for _, p := range s.partitions {
		served += p.servedTokens
	}
	r.Partitions = make([]partitionResult, len(s.partitions))
	for i, p := range s.partitions {
		slices.Sort(p.ttft)
		r.Partitions[i] = partitionResult{
			Name:         f.adm.specs[i].Name,
			Weight:       f.adm.specs[i].Weight,
			ServedTokens: p.servedTokens,
			TTFTP99:      round(percentile(p.ttft, 0.99)),
			Completed:    len(p.ttft),
			Rejected:     p.rejected,
		}
		if served > 0 {
			r.Partitions[i].ServedShare = round(float64(p.servedTokens) / float64(served))
		}
	}
	return r
}

// round keeps six decimals: microseconds for times, and a stable, readable
// JSON for ratios.
func round(x float64) float64 { return math.Round(x*1e6) / 1e6 }
