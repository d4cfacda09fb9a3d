package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/sim/simserver"
)

func chatParams(content string, maxTokens int64) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:     "sim",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)},
		MaxTokens: openai.Int(maxTokens),
		Seed:      openai.Int(7),
	}
}

func TestOpenAIClientEndToEnd(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 3, timeScale: 0})
	c := f.client()
	ctx := t.Context()

	t.Run("models", func(t *testing.T) {
		page, err := c.Models.List(ctx)
		require.NoError(t, err)
		require.Len(t, page.Data, 1)
		assert.Equal(t, "sim", page.Data[0].ID)
	})

	t.Run("chat, streamed deltas equal the non-streamed text", func(t *testing.T) {
		params := chatParams("Tell me about prefix caches.", 20)
		whole, err := c.Chat.Completions.New(ctx, params)
		require.NoError(t, err)
		require.Len(t, whole.Choices, 1)
		text := whole.Choices[0].Message.Content
		require.NotEmpty(t, text)
		assert.Equal(t, int64(20), whole.Usage.CompletionTokens)

		params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := c.Chat.Completions.NewStreaming(ctx, params)
		var b strings.Builder
		var usage openai.CompletionUsage
		for stream.Next() {
			chunk := stream.Current()
			if len(chunk.Choices) > 0 {
				b.WriteString(chunk.Choices[0].Delta.Content)
			}
			if chunk.Usage.TotalTokens > 0 {
				usage = chunk.Usage
			}
		}
		require.NoError(t, stream.Err())
		assert.Equal(t, text, b.String())
		assert.Equal(t, int64(20), usage.CompletionTokens, "include_usage passed through")
		assert.Equal(t, whole.Usage.PromptTokens, usage.PromptTokens)
	})

	t.Run("completions, streaming and not", func(t *testing.T) {
		params := openai.CompletionNewParams{
			Model:     "sim",
			Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
			MaxTokens: openai.Int(12),
			Seed:      openai.Int(3),
		}
		whole, err := c.Completions.New(ctx, params)
		require.NoError(t, err)
		require.Len(t, whole.Choices, 1)
		stream := c.Completions.NewStreaming(ctx, params)
		var b strings.Builder
		for stream.Next() {
			if ch := stream.Current().Choices; len(ch) > 0 {
				b.WriteString(ch[0].Text)
			}
		}
		require.NoError(t, stream.Err())
		assert.Equal(t, whole.Choices[0].Text, b.String())
	})

	t.Run("cached tokens reported on a repeated prompt", func(t *testing.T) {
		long := strings.Repeat("The same long system prompt. ", 200)
		var cached int64
		for range 6 {
			r, err := c.Chat.Completions.New(ctx, chatParams(long, 4))
			require.NoError(t, err)
			cached = max(cached, r.Usage.PromptTokensDetails.CachedTokens)
		}
		assert.Positive(t, cached, "some repeat landed on a worker that had the prefix")
	})
}

// Each error of docs/errors.md, as the official client sees it.
func TestOpenAIClientSeesErrors(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 1, timeScale: 0, args: []string{"--limits.max_body_bytes", "4096"}})
	c := f.client()
	ctx := t.Context()
	apiErr := func(t *testing.T, err error, status int, typ, code string) {
		t.Helper()
		var e *openai.Error
		require.True(t, errors.As(err, &e), "an API error, got %v", err)
		assert.Equal(t, status, e.StatusCode)
		if typ != "" {
			assert.Equal(t, typ, e.Type)
		}
		if code != "" {
			assert.Equal(t, code, e.Code)
		}
	}

	_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "sim", Messages: []openai.ChatCompletionMessageParamUnion{}})
	apiErr(t, err, 400, "invalid_request_error", "")

	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-nope", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	apiErr(t, err, 404, "invalid_request_error", "model_not_found")

	_, err = c.Chat.Completions.New(ctx, chatParams(strings.Repeat("x", 5000), 4))
	apiErr(t, err, 413, "invalid_request_error", "request_too_large")

	err = c.Get(ctx, "nothing-here", nil, nil)
	apiErr(t, err, 404, "invalid_request_error", "unknown_url")

	err = c.Execute(ctx, http.MethodDelete, "chat/completions", nil, nil)
	apiErr(t, err, 405, "invalid_request_error", "method_not_allowed")

	// A worker's 4xx passes through as it is.
	require.NoError(t, f.sims[0].SetFaults(simserver.Faults{ForceStatus: 422}))
	_, err = c.Chat.Completions.New(ctx, chatParams("hi", 4))
	apiErr(t, err, 422, "", "injected_fault")

	// A worker's 500 is the gateway's 502.
	require.NoError(t, f.sims[0].SetFaults(simserver.Faults{ForceStatus: 500}))
	_, err = c.Chat.Completions.New(ctx, chatParams("hi", 4))
	apiErr(t, err, 502, "server_error", "upstream_error")

	// No routable worker: 503.
	require.NoError(t, f.sims[0].SetFaults(simserver.Faults{FailHealth: true}))
	require.Eventually(t, func() bool { return !f.allHealthy(t, 1) }, 5*time.Second, 10*time.Millisecond)
	_, err = c.Chat.Completions.New(ctx, chatParams("hi", 4))
	apiErr(t, err, 503, "server_error", "no_routable_worker")
}

// A worker killed while requests flow: the rest succeed on the others, and
// the gateway's in-flight counts return to zero.
func TestWorkerKilledWhileRequestsFlow(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 3, timeScale: 0.05})
	c := f.client()
	ctx := t.Context()

	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				if g == 0 && i == 5 {
					_ = f.sims[1].Close() // kill a worker mid-flow
				}
				_, err := c.Chat.Completions.New(ctx, chatParams("request under fire", 16))
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("request failed although two workers remained: %v", err)
	}
	assert.Eventually(t, func() bool { return f.inflight(t) == 0 }, 5*time.Second, 20*time.Millisecond)
	assert.Positive(t, metricSum(f.metrics(t), "kvgate_retries_total"), "requests on the dead worker were retried")
}

// A stream whose worker dies mid-way ends promptly for the client with an
// error, never a hang.
func TestStreamCutMidwayEndsWithAnError(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 1, timeScale: 0.05, faults: simserver.Faults{DieAfterTokens: 5}})
	c := f.client()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	stream := c.Chat.Completions.NewStreaming(ctx, chatParams("stream me", 40))
	chunks := 0
	for stream.Next() {
		chunks++
	}
	err := stream.Err()
	require.Error(t, err, "the client sees the broken stream")
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "it ended, not timed out")
	assert.Contains(t, err.Error(), "upstream_stream_error")
	assert.Positive(t, chunks, "tokens before the failure reached the client")
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.Eventually(t, func() bool { return f.inflight(t) == 0 }, 5*time.Second, 20*time.Millisecond)
}

// The client's cancellation reaches the worker: the simulator sees the request cancelled.
func TestClientCancellationReachesTheWorker(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 1, timeScale: 1})
	c := f.client()
	ctx, cancel := context.WithCancel(t.Context())
	stream := c.Chat.Completions.NewStreaming(ctx, chatParams("a long answer please", 2000))
	require.True(t, stream.Next(), "first chunk arrives: %v", stream.Err())
	cancel()
	for stream.Next() {
	}
	_ = stream.Close()
	assert.Eventually(t, func() bool { return f.sims[0].Stats().Cancelled == 1 }, 5*time.Second, 10*time.Millisecond,
		"simulator observed the cancellation")
	assert.Eventually(t, func() bool { return f.inflight(t) == 0 }, 5*time.Second, 20*time.Millisecond)
	assert.Equal(t, int64(0), f.sims[0].Stats().Completed)
}

// Non-streaming too: the client's cancellation reaches the worker.
func TestNonStreamingCancellationReachesTheWorker(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 1, timeScale: 1})
	c := f.client()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Chat.Completions.New(ctx, chatParams("a long answer please", 2000))
		done <- err
	}()
	require.Eventually(t, func() bool { return f.sims[0].Stats().Running == 1 }, 5*time.Second, 5*time.Millisecond)
	cancel()
	require.Error(t, <-done)
	assert.Eventually(t, func() bool { return f.sims[0].Stats().Cancelled == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Eventually(t, func() bool { return f.inflight(t) == 0 }, 5*time.Second, 20*time.Millisecond)
}

// A worker that accepts requests and never answers (the simulator's hang
// fault): each request waits out the header timeout, then succeeds on
// another worker.
func TestHungWorkerIsRetriedElsewhere(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 2, timeScale: 0, faults: simserver.Faults{Hang: true},
		yaml: "upstream:\n  response_header_timeout: 300ms\n"})
	c := f.client()
	// Cold requests tie between two idle workers and go to either: send
	// until one has met the hung worker (each succeeds all the same).
	hung := `kvgate_upstream_errors_total{kind="timeout",worker="w0"}`
	for i := 0; i < 16 && !strings.Contains(f.metrics(t), hung); i++ {
		_, err := c.Chat.Completions.New(t.Context(), chatParams("are you there?", 4))
		require.NoError(t, err)
	}
	assert.Eventually(t, func() bool { return strings.Contains(f.metrics(t), hung) }, 2*time.Second, 20*time.Millisecond)
	assert.Eventually(t, func() bool { return f.inflight(t) == 0 }, 5*time.Second, 20*time.Millisecond)
}

// The workers' telemetry is on /metrics as the gateway last read it:
// running, waiting and KV usage per worker, for dashboards that do not
// scrape the engines themselves.
func TestWorkerTelemetryIsExported(t *testing.T) {
	f := startFleet(t, fleetConfig{workers: 2})
	resp, err := http.Post(f.simURL[1]+"/sim/load", "application/json", strings.NewReader(`{"running":5,"waiting":2,"kv_usage":0.25}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Eventually(t, func() bool {
		m := f.metrics(t)
		return strings.Contains(m, `kvgate_worker_running{worker="w1"} 5`) &&
			strings.Contains(m, `kvgate_worker_waiting{worker="w1"} 2`) &&
			strings.Contains(m, `kvgate_worker_kv_usage{worker="w1"} 0.25`) &&
			strings.Contains(m, `kvgate_worker_running{worker="w0"} 0`)
	}, 5*time.Second, 20*time.Millisecond)
}
