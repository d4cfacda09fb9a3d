package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const tenantsYAML = `
admission:
  mode: enforce
  default_partition: batch
  partitions:
    - name: batch
      weight: 1
      api_keys: [batch-key]
    - name: interactive
      weight: 3
      api_keys: [interactive-key]
  queue:
    max_per_partition: 1
    timeout: 400ms
`

func (f *fleet) clientWithKey(key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(f.url+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

func apiStatus(t *testing.T, err error) (*openai.Error, int) {
	t.Helper()
	var e *openai.Error
	require.True(t, errors.As(err, &e), "an API error, got %v", err)
	return e, e.StatusCode
}

// API keys select partitions; without a known key there is no service.
func TestAPIKeysSelectPartitions(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 2, timeScale: 0, yaml: tenantsYAML})
	ctx := t.Context()

	nope := f.clientWithKey("nope")
	_, err := nope.Chat.Completions.New(ctx, chatParams("hi", 4))
	e, status := apiStatus(t, err)
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Equal(t, "invalid_api_key", e.Code)
	resp, err := http.Post(f.url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim","messages":[{"role":"user","content":"x"}]}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no key at all")

	interactive, batch := f.clientWithKey("interactive-key"), f.clientWithKey("batch-key")
	for range 3 {
		_, err = interactive.Chat.Completions.New(ctx, chatParams("hi", 4))
		require.NoError(t, err)
	}
	_, err = batch.Chat.Completions.New(ctx, chatParams("hi", 4))
	require.NoError(t, err)
	m := f.metrics(t)
	assert.Contains(t, m, `kvgate_admission_decisions_total{outcome="admitted",partition="interactive"} 3`)
	assert.Contains(t, m, `kvgate_admission_decisions_total{outcome="admitted",partition="batch"} 1`)
	assert.Positive(t, metricSum(m, `kvgate_partition_served_tokens_total{partition="interactive"}`))
	assert.NotContains(t, m, "batch-key", "keys never reach the metrics")
}

// A full fleet: one waiter per partition, the next gets 429 with
// Retry-After, the waiter gets 503 at the queue timeout; afterwards nothing
// is left in flight or queued.
func TestQueueLimitsOnAFullFleet(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 1, maxRunning: 1, timeScale: 1, yaml: tenantsYAML})
	c := f.clientWithKey("batch-key")

	// Occupy the only slot with a long stream.
	holdCtx, release := context.WithCancel(t.Context())
	stream := c.Chat.Completions.NewStreaming(holdCtx, chatParams("a long answer", 5000))
	require.True(t, stream.Next(), "the first request runs: %v", stream.Err())

	waiter := make(chan error, 1)
	go func() {
		_, err := c.Chat.Completions.New(t.Context(), chatParams("waiting", 4))
		waiter <- err
	}()
	require.Eventually(t, func() bool {
		return strings.Contains(f.metrics(t), `kvgate_admission_queue_depth{partition="batch"} 1`)
	}, 5*time.Second, 10*time.Millisecond, "the second request waits")

	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"sim","max_tokens":4,"messages":[{"role":"user","content":"third"}]}`))
	req.Header.Set("Authorization", "Bearer batch-key")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the partition's queue is full")
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))

	select {
	case err := <-waiter:
		e, status := apiStatus(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, status)
		assert.Equal(t, "queue_timeout", e.Code)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never timed out")
	}

	release()
	for stream.Next() {
	}
	_ = stream.Close()
	assert.Eventually(t, func() bool {
		m := f.metrics(t)
		return metricSum(m, "kvgate_admission_queue_depth") == 0 &&
			metricSum(m, "kvgate_partition_inflight") == 0 &&
			metricSum(m, "kvgate_worker_inflight") == 0
	}, 5*time.Second, 20*time.Millisecond, "nothing leaked: queue, partition in-flight and worker in-flight back to 0")

	// And the fleet serves again.
	_, err = c.Chat.Completions.New(t.Context(), chatParams("after", 4))
	require.NoError(t, err)
}
