package workers

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sglangLoadsDP2 is SGLang's /v1/loads with two DP ranks: an ISO timestamp
// at the top and a float one per rank, ints and floats mixed, optional
// sections and an aggregate the parser does not need.
const sglangLoadsDP2 = `{
  "timestamp": "2026-02-13T09:29:37.123456+00:00",
  "version": "0.5.9",
  "dp_rank_count": 2,
  "loads": [
    {
      "dp_rank": 0, "timestamp": 1770974977.12,
      "num_running_reqs": 38, "num_waiting_reqs": 102, "num_waiting_uncached_tokens": 51200,
      "num_used_tokens": 155000, "num_total_tokens": 206200, "max_total_num_tokens": 161721,
      "token_usage": 0.96, "gen_throughput": 1420.5, "cache_hit_rate": 0.81, "utilization": 0.96,
      "max_running_requests": 48, "num_total_reqs": 140,
      "memory": {"weight_gb": 15.2, "kv_cache_gb": 52.1, "graph_gb": 1.3, "token_capacity": 161721},
      "queues": {"waiting": 102, "grammar": 0, "paused": 0, "retracted": 0},
      "speculative": null, "lora": null, "disaggregation": null
    },
    {
      "dp_rank": 1, "timestamp": 1770974977.13,
      "num_running_reqs": 2.0, "num_waiting_reqs": 0.0, "num_waiting_uncached_tokens": 0,
      "num_used_tokens": 8100, "num_total_tokens": 8100, "max_total_num_tokens": 161721,
      "token_usage": 0.05, "gen_throughput": 80.0, "cache_hit_rate": 0.0, "utilization": 0.05,
      "max_running_requests": 48.0, "num_total_reqs": 2
    }
  ],
  "aggregate": {"total_running_reqs": 40, "total_waiting_reqs": 102, "total_reqs": 142,
    "avg_token_usage": 0.505, "avg_throughput": 750.25, "avg_utilization": 0.505}
}`

// sglangLoadsOneOfFour answers for one rank of four (as a dp_rank filter,
// or a rank that did not reply in time, would) with nullable fields null.
const sglangLoadsOneOfFour = `{"timestamp":"2026-02-13T09:29:37+00:00","version":"0.5.9","dp_rank_count":4,
"loads":[{"dp_rank":3,"timestamp":null,"num_running_reqs":7,"num_waiting_reqs":1,
"num_used_tokens":4000,"max_total_num_tokens":16000,"token_usage":null,"max_running_requests":null}]}`

func TestParseSGLangLoads(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		expected int
		want     Sample
	}{
		{
			name: "every rank reported is complete",
			body: sglangLoadsDP2,
			want: Sample{
				Running: 40, Waiting: 102, KVUsage: 0.96, MaxRunning: 96, Complete: true,
				Ranks: []RankLoad{
					{Rank: 0, Running: 38, Waiting: 102, KVUsage: 0.96, MaxRunning: 48},
					{Rank: 1, Running: 2, Waiting: 0, KVUsage: 0.05, MaxRunning: 48},
				},
				Source: SourceSGLangLoads,
			},
		},
		{
			name:     "the configured rank count overrides the server's",
			body:     sglangLoadsDP2,
			expected: 3,
			want: Sample{
				Running: 40, Waiting: 102, KVUsage: 0.96, MaxRunning: 96, Complete: false,
				Ranks: []RankLoad{
					{Rank: 0, Running: 38, Waiting: 102, KVUsage: 0.96, MaxRunning: 48},
					{Rank: 1, Running: 2, Waiting: 0, KVUsage: 0.05, MaxRunning: 48},
				},
				Source: SourceSGLangLoads,
			},
		},
		{
			name: "one rank of four is incomplete; null usage falls back to used/max tokens",
			body: sglangLoadsOneOfFour,
			want: Sample{
				Running: 7, Waiting: 1, KVUsage: 0.25, Complete: false,
				Ranks:  []RankLoad{{Rank: 3, Running: 7, Waiting: 1, KVUsage: 0.25}},
				Source: SourceSGLangLoads,
			},
		},
		{
			name: "no dp_rank: ranks by position; no count: complete as reported",
			body: `{"loads":[{"num_running_reqs":1,"num_waiting_reqs":2},{"num_running_reqs":3,"num_waiting_reqs":4,"dp_rank":null}]}`,
			want: Sample{
				Running: 4, Waiting: 6, KVUsage: -1, Complete: true,
				Ranks: []RankLoad{
					{Rank: 0, Running: 1, Waiting: 2, KVUsage: -1},
					{Rank: 1, Running: 3, Waiting: 4, KVUsage: -1},
				},
				Source: SourceSGLangLoads,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSGLangLoads([]byte(tt.body), tt.expected)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			telemetryCheckSample(t, got)
		})
	}
}

func TestParseSGLangLoadsRejectsGarbage(t *testing.T) {
	tests := []struct{ name, body string }{
		{"empty", ""},
		{"not JSON", "Not Found"},
		{"FastAPI 404 body", `{"detail":"Not Found"}`},
		{"an array", `[{"num_running_reqs":1,"num_waiting_reqs":0}]`},
		{"loads not an array", `{"loads":{"num_running_reqs":1}}`},
		{"no ranks", `{"dp_rank_count":0,"loads":[]}`},
		{"rank without counts", `{"loads":[{"dp_rank":0,"token_usage":0.5}]}`},
		{"null rank entry", `{"loads":[null]}`},
		{"negative running", `{"loads":[{"num_running_reqs":-1,"num_waiting_reqs":0}]}`},
		{"count as a string", `{"loads":[{"num_running_reqs":"3","num_waiting_reqs":0}]}`},
		{"fractional rank", `{"loads":[{"dp_rank":0.5,"num_running_reqs":1,"num_waiting_reqs":0}]}`},
		{"negative rank", `{"loads":[{"dp_rank":-2,"num_running_reqs":1,"num_waiting_reqs":0}]}`},
		{"rank twice", `{"loads":[{"dp_rank":0,"num_running_reqs":1,"num_waiting_reqs":0},{"dp_rank":0,"num_running_reqs":2,"num_waiting_reqs":0}]}`},
		{"usage out of range", `{"loads":[{"num_running_reqs":1,"num_waiting_reqs":0,"token_usage":40}]}`},
		{"negative rank count", `{"dp_rank_count":-1,"loads":[{"num_running_reqs":1,"num_waiting_reqs":0}]}`},
		{"huge number", `{"loads":[{"num_running_reqs":1e999,"num_waiting_reqs":0}]}`},
		{"truncated", sglangLoadsDP2[:len(sglangLoadsDP2)/2]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSGLangLoads([]byte(tt.body), 0)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrTelemetryFormat)
		})
	}
}

func TestParseSGLangGetLoad(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		expected int
		want     Sample
	}{
		{
			name:     "array per rank; num_reqs counts the waiting ones too",
			body:     `[{"dp_rank":0,"num_reqs":140,"num_waiting_reqs":102,"num_tokens":206200,"ts_tic":81234.5},{"dp_rank":1,"num_reqs":2,"num_waiting_reqs":0,"num_tokens":8100,"num_pending_tokens":0,"ts_tic":81234.6}]`,
			expected: 2,
			want: Sample{
				Running: 40, Waiting: 102, KVUsage: -1, Complete: true,
				Ranks: []RankLoad{
					{Rank: 0, Running: 38, Waiting: 102, KVUsage: -1},
					{Rank: 1, Running: 2, Waiting: 0, KVUsage: -1},
				},
				Source: SourceSGLangGetLoad,
			},
		},
		{
			name:     "older servers answer one object",
			body:     `{"dp_rank":0,"num_reqs":5.0,"num_waiting_reqs":1,"num_tokens":3000,"ts_tic":12.5}`,
			expected: 2,
			want: Sample{
				Running: 4, Waiting: 1, KVUsage: -1, Complete: false,
				Ranks:  []RankLoad{{Rank: 0, Running: 4, Waiting: 1, KVUsage: -1}},
				Source: SourceSGLangGetLoad,
			},
		},
		{
			name: "pages instead of tokens, rank left out",
			body: ` [{"num_reqs":3,"num_waiting_reqs":3,"num_pages":12}]`,
			want: Sample{
				Running: 0, Waiting: 3, KVUsage: -1, Complete: true,
				Ranks:  []RankLoad{{Rank: 0, Running: 0, Waiting: 3, KVUsage: -1}},
				Source: SourceSGLangGetLoad,
			},
		},
		{
			name: "more waiting than requests is a torn read: no negative running",
			body: `[{"dp_rank":0,"num_reqs":1,"num_waiting_reqs":2}]`,
			want: Sample{
				Running: 0, Waiting: 2, KVUsage: -1, Complete: true,
				Ranks:  []RankLoad{{Rank: 0, Running: 0, Waiting: 2, KVUsage: -1}},
				Source: SourceSGLangGetLoad,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSGLangGetLoad([]byte(tt.body), tt.expected)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			telemetryCheckSample(t, got)
		})
	}
}

func TestParseSGLangGetLoadRejectsGarbage(t *testing.T) {
	tests := []struct{ name, body string }{
		{"empty", ""},
		{"the oldest form: a token load only", `{"load": 12345}`},
		{"empty array", `[]`},
		{"a number", `42`},
		{"array of numbers", `[1,2,3]`},
		{"negative waiting", `[{"dp_rank":0,"num_reqs":1,"num_waiting_reqs":-1}]`},
		{"rank twice", `[{"dp_rank":1,"num_reqs":1,"num_waiting_reqs":0},{"dp_rank":1,"num_reqs":1,"num_waiting_reqs":0}]`},
		{"trailing garbage", `[{"dp_rank":0,"num_reqs":1,"num_waiting_reqs":0}] xyz`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSGLangGetLoad([]byte(tt.body), 0)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrTelemetryFormat)
		})
	}
}

// sglangMetricsDPAttention is SGLang's /metrics with DP attention over two
// ranks: every series carries dp_rank, and each rank's scheduler its own
// tp_rank.
const sglangMetricsDPAttention = `# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 12.0
sglang:num_running_reqs{dp_rank="1",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="1",pp_rank="0",tp_rank="1"} 20.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0
sglang:num_queue_reqs{dp_rank="1",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="1",pp_rank="0",tp_rank="1"} 6.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{dp_rank="0",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.31
sglang:token_usage{dp_rank="1",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="1",pp_rank="0",tp_rank="1"} 0.88
# HELP sglang:max_running_requests Maximum running requests.
# TYPE sglang:max_running_requests gauge
sglang:max_running_requests{dp_rank="0",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 64.0
sglang:max_running_requests{dp_rank="1",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="1",pp_rank="0",tp_rank="1"} 64.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{dp_rank="0",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.42
sglang:cache_hit_rate{dp_rank="1",engine_type="unified",model_name="deepseek-ai/DeepSeek-V3",moe_ep_rank="1",pp_rank="0",tp_rank="1"} 0.4
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="deepseek-ai/DeepSeek-V3"} 10.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="deepseek-ai/DeepSeek-V3"} 12.0
sglang:time_to_first_token_seconds_sum{model_name="deepseek-ai/DeepSeek-V3"} 1.9
sglang:time_to_first_token_seconds_count{model_name="deepseek-ai/DeepSeek-V3"} 12.0
`

// sglangMetricsAllSchedulersTP2 is TP=2 with
// --enable-metrics-for-all-schedulers: both tensor-parallel schedulers repeat
// the one rank's numbers.
const sglangMetricsAllSchedulersTP2 = `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 4.0
sglang:num_running_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 4.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.0
sglang:num_queue_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 3.0
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.5
sglang:token_usage{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="1"} 0.5
`

// sglangMetricsPriority is priority scheduling: an aggregate series with an
// empty priority label beside one series per priority bucket.
const sglangMetricsPriority = `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",pp_rank="0",priority="",tp_rank="0"} 14.0
sglang:num_running_reqs{model_name="m",pp_rank="0",priority="-9223372036854775808",tp_rank="0"} 0.0
sglang:num_running_reqs{model_name="m",pp_rank="0",priority="-1",tp_rank="0"} 0.0
sglang:num_running_reqs{model_name="m",pp_rank="0",priority="0",tp_rank="0"} 14.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m",pp_rank="0",priority="-1",tp_rank="0"} 2.0
sglang:num_queue_reqs{model_name="m",pp_rank="0",priority="5",tp_rank="0"} 1.0
`

func TestParseSGLangMetrics(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		expected int
		want     Sample
	}{
		{
			name: "DP attention: one rank per dp_rank",
			body: sglangMetricsDPAttention,
			want: Sample{
				Running: 32, Waiting: 6, KVUsage: 0.88, MaxRunning: 128, Complete: true,
				Ranks: []RankLoad{
					{Rank: 0, Running: 12, Waiting: 0, KVUsage: 0.31, MaxRunning: 64},
					{Rank: 1, Running: 20, Waiting: 6, KVUsage: 0.88, MaxRunning: 64},
				},
				Source: SourceSGLangMetrics,
			},
		},
		{
			name:     "tensor-parallel schedulers repeating one rank are not summed",
			body:     sglangMetricsAllSchedulersTP2,
			expected: 1,
			want: Sample{
				Running: 4, Waiting: 3, KVUsage: 0.5, Complete: true,
				Ranks:  []RankLoad{{Rank: 0, Running: 4, Waiting: 3, KVUsage: 0.5}},
				Source: SourceSGLangMetrics,
			},
		},
		{
			name: "priority: the aggregate wins; buckets are summed only without one",
			body: sglangMetricsPriority,
			want: Sample{
				Running: 14, Waiting: 3, KVUsage: -1, Complete: true,
				Ranks:  []RankLoad{{Rank: 0, Running: 14, Waiting: 3, KVUsage: -1}},
				Source: SourceSGLangMetrics,
			},
		},
		{
			name: "bare series without TYPE lines",
			body: "sglang:num_running_reqs 1\nsglang:num_queue_reqs 0\nsglang:token_usage 0.125\n",
			want: Sample{
				Running: 1, KVUsage: 0.125, Complete: true,
				Ranks:  []RankLoad{{Rank: 0, Running: 1, KVUsage: 0.125}},
				Source: SourceSGLangMetrics,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSGLangMetrics([]byte(tt.body), tt.expected)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			telemetryCheckSample(t, got)
		})
	}
}

func TestParseSGLangMetricsRejectsGarbage(t *testing.T) {
	tests := []struct{ name, body string }{
		{"empty", ""},
		{"vLLM metrics", vllmMetricsDP2},
		{"no queue family", "sglang:num_running_reqs 1\n"},
		{"negative queue", "sglang:num_running_reqs 1\nsglang:num_queue_reqs -3\n"},
		{"dp_rank not a number", `sglang:num_running_reqs{dp_rank="a"} 1` + "\nsglang:num_queue_reqs 0\n"},
		{"duplicate TYPE", "# TYPE sglang:num_running_reqs gauge\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\nsglang:num_queue_reqs 0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSGLangMetrics([]byte(tt.body), 0)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrTelemetryFormat)
		})
	}
}

func FuzzParseSGLangLoads(f *testing.F) {
	f.Add([]byte(sglangLoadsDP2))
	f.Add([]byte(sglangLoadsOneOfFour))
	f.Add([]byte(`{"loads":[{"num_running_reqs":1,"num_waiting_reqs":2}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseSGLangLoads(body, 0)
		if err != nil {
			return
		}
		telemetryCheckSample(t, s)
		assert.Equal(t, SourceSGLangLoads, s.Source)
		assert.Zero(t, s.PrefixCacheHits)
	})
}

func FuzzParseSGLangGetLoad(f *testing.F) {
	f.Add([]byte(`[{"dp_rank":0,"num_reqs":140,"num_waiting_reqs":102,"num_tokens":206200,"ts_tic":81234.5}]`))
	f.Add([]byte(`{"dp_rank":0,"num_reqs":5,"num_waiting_reqs":1}`))
	f.Add([]byte(`{"load": 12345}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseSGLangGetLoad(body, 0)
		if err != nil {
			return
		}
		telemetryCheckSample(t, s)
		for _, r := range s.Ranks {
			assert.Equal(t, -1.0, r.KVUsage, "/get_load has no KV usage")
		}
	})
}

func FuzzParseSGLangMetrics(f *testing.F) {
	f.Add([]byte(sglangMetricsDPAttention))
	f.Add([]byte(sglangMetricsPriority))
	f.Add([]byte(sglangMetricsAllSchedulersTP2))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseSGLangMetrics(body, 0)
		if err != nil {
			return
		}
		telemetryCheckSample(t, s)
	})
}
