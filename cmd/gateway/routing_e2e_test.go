package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type routed struct {
	worker, decision string
	cached           int
}

// post sends one chat request and reports where it went and what the
// worker found cached.
func (f *fleet) post(t *testing.T, system, user string) routed {
	t.Helper()
	body := fmt.Sprintf(`{"model":"sim","max_tokens":4,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}]}`, system, user)
	resp, err := http.Post(f.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, 200, resp.StatusCode, string(b))
	var out struct {
		Usage struct {
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(b, &out))
	return routed{worker: resp.Header.Get("X-Kvgate-Worker"), decision: resp.Header.Get("X-Kvgate-Decision"),
		cached: out.Usage.PromptTokensDetails.CachedTokens}
}

func (f *fleet) simIndex(worker string) int {
	var i int
	_, _ = fmt.Sscanf(worker, "w%d", &i)
	return i
}

// A repeated long prompt lands on one worker, which then serves it from its
// cache; forced full, the prefix moves by one pressure spill to exactly one
// new worker.
func TestCacheAwareEndToEnd(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 4, timeScale: 0})
	system := strings.Repeat("You are the support agent of a large bank; follow the policy. ", 150) // ~9 KB

	first := f.post(t, system, "question 0")
	assert.Equal(t, "cold_p2c", first.decision)
	owner := first.worker
	for i := 1; i <= 5; i++ {
		r := f.post(t, system, fmt.Sprintf("question %d", i))
		assert.Equal(t, owner, r.worker, "request %d stays with the prefix's owner", i)
		assert.Equal(t, "owner_hit", r.decision)
		assert.Greater(t, r.cached, 2000, "the worker served the shared prefix from its cache")
	}

	// Make the owner look full to the gateway's telemetry poller.
	resp, err := http.Post(f.simURL[f.simIndex(owner)]+"/sim/load", "application/json", strings.NewReader(`{"running":8,"waiting":20}`))
	require.NoError(t, err)
	resp.Body.Close()

	var spill routed
	require.Eventually(t, func() bool {
		spill = f.post(t, system, "after the owner filled up")
		return spill.decision == "pressure_spill"
	}, 5*time.Second, 50*time.Millisecond, "the gateway sees the owner full and spills")
	assert.NotEqual(t, owner, spill.worker)

	for i := range 6 {
		r := f.post(t, system, fmt.Sprintf("later question %d", i))
		assert.Equal(t, spill.worker, r.worker, "every later request joins the one new owner, no third worker")
		assert.Contains(t, []string{"owner_hit", "spill_coalesced"}, r.decision)
	}
	m := f.metrics(t)
	assert.Contains(t, m, `kvgate_routing_decisions_total{decision="pressure_spill",model="sim"} 1`)
	assert.Contains(t, m, "kvgate_index_blocks ")
	assert.Contains(t, m, `kvgate_prefix_match_ratio_count{model="sim"}`)
}
