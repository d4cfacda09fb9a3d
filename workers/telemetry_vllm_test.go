package workers

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vllmMetricsDP2 is the shape of a vLLM V1 server's /metrics with
// --data-parallel-size 2: one series per engine, counters with their
// _created companions, histograms and info gauges around the load gauges.
const vllmMetricsDP2 = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 18046.0
python_gc_objects_collected_total{generation="1"} 3203.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.193395712e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 38.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 64.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.9731
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.1204
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.234567e+06
vllm:prefix_cache_queries_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 65433.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7512345e+09
vllm:prefix_cache_queries_created{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7512345e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 987654.0
vllm:prefix_cache_hits_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12346.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:num_preemptions_total{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="meta-llama/Llama-3.1-8B-Instruct"} 311.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 420.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 420.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 97.25
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.5",model_name="meta-llama/Llama-3.1-8B-Instruct"} 40.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 41.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 41.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.5
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="27898",prefix_caching_hash_algo="sha256"} 1.0
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="1",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="27898",prefix_caching_hash_algo="sha256"} 1.0
`

// vllmMetricsV0 is an older (V0 engine) single-GPU server: no engine label,
// the old gpu_cache_usage_perc name, swapped requests, no prefix counters.
const vllmMetricsV0 = `# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="Qwen/Qwen2.5-7B-Instruct"} 3.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="Qwen/Qwen2.5-7B-Instruct"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="Qwen/Qwen2.5-7B-Instruct"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen2.5-7B-Instruct"} 0.25
# HELP vllm:cpu_cache_usage_perc CPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:cpu_cache_usage_perc gauge
vllm:cpu_cache_usage_perc{model_name="Qwen/Qwen2.5-7B-Instruct"} 0.0
`

func TestParseVLLMMetrics(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		expected int
		want     Sample
	}{
		{
			name: "two DP engines are two ranks, summed, with the fullest KV",
			body: vllmMetricsDP2,
			want: Sample{
				Running: 42, Waiting: 64, KVUsage: 0.9731, Complete: true,
				Ranks: []RankLoad{
					{Rank: 0, Running: 38, Waiting: 64, KVUsage: 0.9731},
					{Rank: 1, Running: 4, Waiting: 0, KVUsage: 0.1204},
				},
				PrefixCacheHits: 1e6, PrefixCacheQueries: 1.3e6,
				Source: SourceVLLMMetrics,
			},
		},
		{
			name:     "fewer engines than configured is incomplete",
			body:     vllmMetricsDP2,
			expected: 4,
			want: Sample{
				Running: 42, Waiting: 64, KVUsage: 0.9731, Complete: false,
				Ranks: []RankLoad{
					{Rank: 0, Running: 38, Waiting: 64, KVUsage: 0.9731},
					{Rank: 1, Running: 4, Waiting: 0, KVUsage: 0.1204},
				},
				PrefixCacheHits: 1e6, PrefixCacheQueries: 1.3e6,
				Source: SourceVLLMMetrics,
			},
		},
		{
			name:     "old server: no engine label is rank 0, gpu_cache_usage_perc is the KV usage",
			body:     vllmMetricsV0,
			expected: 1,
			want: Sample{
				Running: 3, Waiting: 1, KVUsage: 0.25, Complete: true,
				Ranks:  []RankLoad{{Rank: 0, Running: 3, Waiting: 1, KVUsage: 0.25}},
				Source: SourceVLLMMetrics,
			},
		},
		{
			name: "the new KV name wins over the old one",
			body: "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n" +
				"vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.3\n",
			want: Sample{
				Running: 1, KVUsage: 0.3, Complete: true,
				Ranks:  []RankLoad{{Rank: 0, Running: 1, KVUsage: 0.3}},
				Source: SourceVLLMMetrics,
			},
		},
		{
			name: "no KV family: usage unknown",
			body: "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n" +
				"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 5\n",
			want: Sample{
				Running: 2, Waiting: 5, KVUsage: -1, Complete: true,
				Ranks:  []RankLoad{{Rank: 0, Running: 2, Waiting: 5, KVUsage: -1}},
				Source: SourceVLLMMetrics,
			},
		},
		{
			name: "KV reported for one engine only: the other's is unknown",
			body: `vllm:num_requests_running{engine="0"} 1
vllm:num_requests_running{engine="1"} 2
vllm:num_requests_waiting{engine="0"} 0
vllm:num_requests_waiting{engine="1"} 0
vllm:kv_cache_usage_perc{engine="1"} 0.5
`,
			want: Sample{
				Running: 3, KVUsage: 0.5, Complete: true,
				Ranks: []RankLoad{
					{Rank: 0, Running: 1, KVUsage: -1},
					{Rank: 1, Running: 2, KVUsage: 0.5},
				},
				Source: SourceVLLMMetrics,
			},
		},
		{
			name: "a usage a hair over 1 is full",
			body: "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 1.0000001\n",
			want: Sample{
				Running: 1, KVUsage: 1, Complete: true,
				Ranks:  []RankLoad{{Rank: 0, Running: 1, KVUsage: 1}},
				Source: SourceVLLMMetrics,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseVLLMMetrics([]byte(tt.body), tt.expected)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			telemetryCheckSample(t, got)
		})
	}
}

func TestParseVLLMMetricsRejectsGarbage(t *testing.T) {
	tests := []struct{ name, body string }{
		{"empty", ""},
		{"HTML error page", "<html><body>502 Bad Gateway</body></html>"},
		{"JSON", `{"num_requests_running": 3}`},
		{"SGLang metrics", "sglang:num_running_reqs 3\nsglang:num_queue_reqs 1\n"},
		{"no waiting family", "vllm:num_requests_running 3\n"},
		{"no running family", "vllm:num_requests_waiting 3\n"},
		{"negative running", "vllm:num_requests_running -1\nvllm:num_requests_waiting 0\n"},
		{"NaN waiting", "vllm:num_requests_running 1\nvllm:num_requests_waiting NaN\n"},
		{"infinite running", "vllm:num_requests_running +Inf\nvllm:num_requests_waiting 0\n"},
		{"absurd count", "vllm:num_requests_running 1e300\nvllm:num_requests_waiting 0\n"},
		{"negative KV usage", "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc -0.5\n"},
		{"KV usage as a percentage", "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 97\n"},
		{"engine label not a number", `vllm:num_requests_running{engine="zero"} 1` + "\nvllm:num_requests_waiting 0\n"},
		{"negative engine", `vllm:num_requests_running{engine="-1"} 1` + "\nvllm:num_requests_waiting 0\n"},
		{"absurd engine", `vllm:num_requests_running{engine="99999999"} 1` + "\nvllm:num_requests_waiting 0\n"},
		{"truncated mid-line", "vllm:num_requests_running 1\nvllm:num_requests_waiting{engine=\"0\""},
		{"load gauge typed as a histogram", "# TYPE vllm:num_requests_running histogram\n" +
			"vllm:num_requests_running_bucket{le=\"+Inf\"} 1\nvllm:num_requests_running_sum 1\nvllm:num_requests_running_count 1\n" +
			"vllm:num_requests_waiting 0\n"},
		{"negative prefix counter", "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:prefix_cache_hits_total -5\n"},
		{"binary", "\x00\x01\x02\xff\xfe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseVLLMMetrics([]byte(tt.body), 0)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrTelemetryFormat)
		})
	}
}

func FuzzParseVLLMMetrics(f *testing.F) {
	f.Add([]byte(vllmMetricsDP2))
	f.Add([]byte(vllmMetricsV0))
	f.Add([]byte("vllm:num_requests_running{engine=\"3\"} 1\nvllm:num_requests_waiting{engine=\"3\"} 2\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		s, err := ParseVLLMMetrics(body, 0)
		if err != nil {
			return
		}
		telemetryCheckSample(t, s)
		assert.True(t, s.Complete, "with nothing expected, what is reported is complete")
		assert.Equal(t, SourceVLLMMetrics, s.Source)
		assert.GreaterOrEqual(t, s.PrefixCacheHits, 0.0)
		assert.GreaterOrEqual(t, s.PrefixCacheQueries, 0.0)
	})
}
