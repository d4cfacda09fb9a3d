package simserver

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scrape parses /metrics as a gateway does, with the real text parser.
func scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp := get(t, url+"/metrics")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return families
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// value reads the single sample of a gauge or counter family.
func value(t testing.TB, families map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := families[name]
	require.True(t, ok, "family %s missing", name)
	require.Len(t, f.GetMetric(), 1, name)
	m := f.GetMetric()[0]
	if f.GetType() == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

type getLoad []struct {
	DPRank         int     `json:"dp_rank"`
	NumReqs        int     `json:"num_reqs"`
	NumWaitingReqs int     `json:"num_waiting_reqs"`
	NumTokens      int     `json:"num_tokens"`
	TSTic          float64 `json:"ts_tic"`
}

type loads struct {
	Timestamp   string `json:"timestamp"`
	Version     string `json:"version"`
	DPRankCount int    `json:"dp_rank_count"`
	Loads       []struct {
		DPRank             int     `json:"dp_rank"`
		NumRunningReqs     int     `json:"num_running_reqs"`
		NumWaitingReqs     int     `json:"num_waiting_reqs"`
		NumUsedTokens      int     `json:"num_used_tokens"`
		MaxTotalNumTokens  int     `json:"max_total_num_tokens"`
		TokenUsage         float64 `json:"token_usage"`
		MaxRunningRequests int     `json:"max_running_requests"`
	} `json:"loads"`
}

func TestMetricsAreVLLMShaped(t *testing.T) {
	_, url := startServer(t, func(c *Config) { c.Models = []string{"llama-3", "alias"} })
	families := scrape(t, url)

	types := map[string]dto.MetricType{
		"vllm:num_requests_running":       dto.MetricType_GAUGE,
		"vllm:num_requests_waiting":       dto.MetricType_GAUGE,
		"vllm:kv_cache_usage_perc":        dto.MetricType_GAUGE,
		"vllm:prefix_cache_hits_total":    dto.MetricType_COUNTER,
		"vllm:prefix_cache_queries_total": dto.MetricType_COUNTER,
		"vllm:cache_config_info":          dto.MetricType_GAUGE,
	}
	for name, typ := range types {
		f, ok := families[name]
		if !assert.True(t, ok, name) {
			continue
		}
		assert.Equal(t, typ, f.GetType(), name)
		require.Len(t, f.GetMetric(), 1, name)
		if name != "vllm:cache_config_info" {
			assert.Equal(t, "llama-3", label(f.GetMetric()[0], "model_name"), "labelled with the first model")
			assert.Equal(t, "0", label(f.GetMetric()[0], "engine"))
		}
	}
	info := families["vllm:cache_config_info"].GetMetric()[0]
	assert.Equal(t, "16", label(info, "block_size"))
	assert.Equal(t, "16384", label(info, "num_gpu_blocks"))
}

func TestTelemetryFollowsTheEngine(t *testing.T) {
	s, url := startServer(t, func(c *Config) { c.TimeScale = 1; c.Engine.DecodeStepBase = 20 * time.Millisecond })

	// Prefix counters after two equal prompts.
	for range 2 {
		resp := post(t, url+"/v1/completions", `{"prompt":"`+longText+`","max_tokens":1}`)
		readAll(t, resp)
	}
	families := scrape(t, url)
	queries := value(t, families, "vllm:prefix_cache_queries_total")
	hits := value(t, families, "vllm:prefix_cache_hits_total")
	assert.Equal(t, float64(2*promptTokens([]byte(longText))), queries)
	assert.Positive(t, hits)
	assert.Less(t, hits, queries/2+1)

	// Three long streams keep the engine busy.
	ctx, cancel := contextWithCancel(t)
	for i := range 3 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions",
			strings.NewReader(fmt.Sprintf(`{"prompt":"%d","max_tokens":5000,"stream":true}`, i)))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
	}
	require.Eventually(t, func() bool { return s.Stats().Running == 3 }, 5*time.Second, 5*time.Millisecond)

	families = scrape(t, url)
	assert.Equal(t, 3.0, value(t, families, "vllm:num_requests_running"))
	assert.Zero(t, value(t, families, "vllm:num_requests_waiting"))
	assert.Positive(t, value(t, families, "vllm:kv_cache_usage_perc"))

	gl := decodeBody[getLoad](t, get(t, url+"/get_load"))
	require.Len(t, gl, 1)
	assert.Equal(t, 3, gl[0].NumReqs)
	assert.Positive(t, gl[0].NumTokens)
	assert.InDelta(t, float64(time.Now().UnixNano())/1e9, gl[0].TSTic, 60)

	l := decodeBody[loads](t, get(t, url+"/v1/loads"))
	require.Len(t, l.Loads, 1)
	assert.Equal(t, 1, l.DPRankCount)
	assert.Equal(t, 3, l.Loads[0].NumRunningReqs)
	assert.Equal(t, 64, l.Loads[0].MaxRunningRequests)
	assert.Equal(t, 262144, l.Loads[0].MaxTotalNumTokens)
	_, err := time.Parse(time.RFC3339Nano, l.Timestamp)
	assert.NoError(t, err)

	cancel()
	require.Eventually(t, func() bool { return s.Stats().Running == 0 }, 5*time.Second, 5*time.Millisecond)
}

func TestLoadOverride(t *testing.T) {
	s, url := startServer(t, nil)

	resp := post(t, url+"/sim/load", `{"running":60,"waiting":12,"kv_usage":0.95}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)

	families := scrape(t, url)
	assert.Equal(t, 60.0, value(t, families, "vllm:num_requests_running"))
	assert.Equal(t, 12.0, value(t, families, "vllm:num_requests_waiting"))
	assert.Equal(t, 0.95, value(t, families, "vllm:kv_cache_usage_perc"))

	gl := decodeBody[getLoad](t, get(t, url+"/get_load"))
	assert.Equal(t, 72, gl[0].NumReqs)
	assert.Equal(t, 12, gl[0].NumWaitingReqs)
	assert.Equal(t, 249037, gl[0].NumTokens, "0.95 of 262144 tokens")

	l := decodeBody[loads](t, get(t, url+"/v1/loads"))
	assert.Equal(t, 60, l.Loads[0].NumRunningReqs)
	assert.Equal(t, 12, l.Loads[0].NumWaitingReqs)
	assert.Equal(t, 0.95, l.Loads[0].TokenUsage)

	// Real scheduling does not see the override.
	r := decodeBody[response](t, post(t, url+"/v1/completions", `{"prompt":"x"}`))
	assert.Equal(t, DefaultMaxTokens, r.Usage.CompletionTokens)
	assert.Zero(t, s.Stats().Running)

	// A partial override leaves the rest real.
	post(t, url+"/sim/load", `{"waiting":5}`)
	families = scrape(t, url)
	assert.Zero(t, value(t, families, "vllm:num_requests_running"))
	assert.Equal(t, 5.0, value(t, families, "vllm:num_requests_waiting"))

	bad := post(t, url+"/sim/load", `{"kv_usage":1.5}`)
	assert.Equal(t, http.StatusBadRequest, bad.StatusCode)

	del, err := http.NewRequest(http.MethodDelete, url+"/sim/load", nil)
	require.NoError(t, err)
	dresp, err := http.DefaultClient.Do(del)
	require.NoError(t, err)
	dresp.Body.Close()
	assert.Equal(t, http.StatusNoContent, dresp.StatusCode)
	families = scrape(t, url)
	assert.Zero(t, value(t, families, "vllm:num_requests_waiting"))
	assert.Zero(t, value(t, families, "vllm:kv_cache_usage_perc"))
}

func TestStatsEndpoint(t *testing.T) {
	_, url := startServer(t, nil)
	readAll(t, post(t, url+"/v1/completions", `{"prompt":"x"}`))
	var st map[string]int64
	st = decodeBody[map[string]int64](t, get(t, url+"/sim/stats"))
	for _, key := range []string{"submitted", "completed", "cancelled", "running", "waiting"} {
		assert.Contains(t, st, key)
	}
	assert.Equal(t, int64(1), st["submitted"])
	assert.Equal(t, int64(1), st["completed"])
}
