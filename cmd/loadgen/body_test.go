package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBodyEncoder(t *testing.T) {
	w, err := newSyntheticPrompts(1, 20, 5, 2, 17)
	require.NoError(t, err)
	tests := []struct {
		endpoint          string
		model             string
		stream, ignoreEOS bool
	}{
		{endpointChat, "sim", true, false},
		{endpointChat, `odd "model" \ name`, false, true},
		{endpointCompletions, "meta-llama/Llama-3.1-8B", true, true},
		{endpointCompletions, "sim", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint+"/"+tt.model, func(t *testing.T) {
			enc, err := newBodyEncoder(tt.endpoint, tt.model, tt.stream, tt.ignoreEOS)
			require.NoError(t, err)
			body := enc.appendBody(nil, w, 4)
			require.True(t, json.Valid(body), "%s", body)

			var got fakeRequest
			require.NoError(t, json.Unmarshal(body, &got))
			prompt := string(w.appendPrompt(nil, 4))
			assert.Equal(t, tt.model, got.Model)
			assert.Equal(t, 17, got.MaxTokens)
			assert.Equal(t, tt.stream, got.Stream)
			assert.Equal(t, tt.ignoreEOS, got.IgnoreEOS)
			assert.Equal(t, tt.stream, got.StreamOptions != nil && got.StreamOptions.IncludeUsage)
			if tt.endpoint == endpointChat {
				require.Len(t, got.Messages, 1)
				assert.Equal(t, "user", got.Messages[0].Role)
				assert.Equal(t, prompt, got.Messages[0].Content)
			} else {
				assert.Equal(t, prompt, got.Prompt)
			}
		})
	}
}

func TestRequestBodyRecycledWhenBothSidesAreDone(t *testing.T) {
	tests := []struct {
		name         string
		writtenFirst bool
	}{
		{"written, then response read", true},
		{"response read, then written", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &bodyPool{}
			b := pool.get()
			b.buf = append(b.buf, "hello"...)
			got, err := io.ReadAll(b.open())
			require.NoError(t, err)
			assert.Equal(t, "hello", string(got))

			first, second := b.release, func() { b.trace.WroteRequest(httptrace.WroteRequestInfo{}) }
			if tt.writtenFirst {
				first, second = second, first
			}
			first()
			assert.Equal(t, "hello", string(b.buf), "one side still holds the body")
			second()
			assert.Empty(t, b.buf, "recycled")
			assert.Zero(t, b.refs.Load())
		})
	}
}

func TestRequestBodyIgnoresSecondWroteRequest(t *testing.T) {
	pool := &bodyPool{}
	b := pool.get()
	b.buf = append(b.buf, "x"...)
	b.open()
	b.trace.WroteRequest(httptrace.WroteRequestInfo{})
	b.trace.WroteRequest(httptrace.WroteRequestInfo{})
	assert.EqualValues(t, 1, b.refs.Load(), "the runner's reference is intact")
	assert.Equal(t, "x", string(b.buf))
}

// Through the real transport, a body comes back to the pool after a
// request, with or without a per-request timeout wrapping the context that
// carries the trace hook.
func TestRequestBodyRecycledAfterRequest(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run(timeout.String(), func(t *testing.T) {
			srv := newFakeServer(t, fakeConfig{})
			rn := newTestRunner(t, srv.baseURL(), endpointChat, true, timeout)
			w, err := newSyntheticPrompts(1, 16, 0, 1, 4)
			require.NoError(t, err)
			enc, err := newBodyEncoder(endpointChat, "sim", true, false)
			require.NoError(t, err)
			pool := &bodyPool{}
			b := pool.get()
			b.buf = enc.appendBody(b.buf, w, 0)
			require.Empty(t, rn.do(context.Background(), b).kind)
			require.Eventually(t, func() bool { return b.refs.Load() == 0 }, 5*time.Second, time.Millisecond)
			assert.Empty(t, b.buf)
		})
	}
}

func BenchmarkAppendBody(b *testing.B) {
	w, err := newSyntheticPrompts(1, 1024, 768, 8, 32)
	require.NoError(b, err)
	enc, err := newBodyEncoder(endpointChat, "sim", true, false)
	require.NoError(b, err)
	pool := &bodyPool{}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		body := pool.get()
		body.buf = enc.appendBody(body.buf, w, i)
		body.open()
		body.release()
		body.trace.WroteRequest(httptrace.WroteRequestInfo{})
		i++
	}
}
