package main

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sendOne builds request 0 for rn's endpoint and sends it.
func sendOne(t testing.TB, ctx context.Context, rn *runner, endpoint string, stream bool, maxTokens int) result {
	t.Helper()
	w, err := newSyntheticPrompts(1, 16, 0, 1, maxTokens)
	require.NoError(t, err)
	enc, err := newBodyEncoder(endpoint, "sim", stream, false)
	require.NoError(t, err)
	pool := &bodyPool{}
	body := pool.get()
	body.buf = enc.appendBody(body.buf, w, 0)
	return rn.do(ctx, body)
}

func newTestRunner(t testing.TB, baseURL, endpoint string, stream bool, timeout time.Duration) *runner {
	t.Helper()
	rn, err := newRunner(runnerConfig{baseURL: baseURL, endpoint: endpoint, stream: stream, timeout: timeout, connections: 4, apiKey: "k-test"})
	require.NoError(t, err)
	t.Cleanup(rn.close)
	return rn
}

func TestRunnerOutcomes(t *testing.T) {
	const maxTokens = 6
	tests := []struct {
		name       string
		cfg        fakeConfig
		endpoint   string
		stream     bool
		timeout    time.Duration
		wantKind   string
		wantTokens int
		wantTTFT   bool
	}{
		{name: "stream tokens from usage", endpoint: endpointChat, stream: true, wantTokens: maxTokens, wantTTFT: true},
		{name: "stream without usage counts content chunks", cfg: fakeConfig{behavior: behaveNoUsage}, endpoint: endpointChat, stream: true, wantTokens: maxTokens, wantTTFT: true},
		{name: "completions stream reads text", endpoint: endpointCompletions, stream: true, wantTokens: maxTokens, wantTTFT: true},
		{name: "stream with no content has no TTFT", cfg: fakeConfig{behavior: behaveOmitContent}, endpoint: endpointChat, stream: true, wantTokens: 0},
		{name: "non-stream tokens from usage", endpoint: endpointChat, wantTokens: maxTokens, wantTTFT: true},
		{name: "non-stream without usage estimates from chars", cfg: fakeConfig{behavior: behaveNoUsage}, endpoint: endpointCompletions, wantTokens: maxTokens, wantTTFT: true},
		{name: "server error is http_500", cfg: fakeConfig{behavior: behaveStatus, status: 500}, endpoint: endpointChat, stream: true, wantKind: "http_500"},
		{name: "rate limit is http_429", cfg: fakeConfig{behavior: behaveStatus, status: 429}, endpoint: endpointChat, wantKind: "http_429"},
		{name: "stream ending without DONE is stream_error", cfg: fakeConfig{behavior: behaveCutClean}, endpoint: endpointChat, stream: true, wantKind: kindStreamError},
		{name: "connection dropped mid-stream is stream_error", cfg: fakeConfig{behavior: behaveAbort}, endpoint: endpointChat, stream: true, wantKind: kindStreamError},
		{name: "error event is stream_error", cfg: fakeConfig{behavior: behaveErrorEvent}, endpoint: endpointChat, stream: true, wantKind: kindStreamError},
		{name: "malformed usage is decode", cfg: fakeConfig{behavior: behaveBadUsage}, endpoint: endpointChat, stream: true, wantKind: kindDecode},
		{name: "malformed body is decode", cfg: fakeConfig{behavior: behaveBadJSON}, endpoint: endpointChat, wantKind: kindDecode},
		{name: "hung server is timeout", cfg: fakeConfig{behavior: behaveHang}, endpoint: endpointChat, stream: true, timeout: 50 * time.Millisecond, wantKind: kindTimeout},
		{name: "slow first token past timeout is timeout", cfg: fakeConfig{firstTokenDelay: 2 * time.Second}, endpoint: endpointChat, stream: true, timeout: 50 * time.Millisecond, wantKind: kindTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, tt.cfg)
			rn := newTestRunner(t, srv.baseURL(), tt.endpoint, tt.stream, tt.timeout)
			res := sendOne(t, context.Background(), rn, tt.endpoint, tt.stream, maxTokens)

			assert.Equal(t, tt.wantKind, res.kind)
			if tt.wantKind != "" {
				return
			}
			assert.Equal(t, tt.wantTokens, res.outputTokens)
			assert.Equal(t, tt.wantTTFT, res.hasTTFT)
			assert.Positive(t, res.e2e)
			if tt.wantTTFT {
				assert.Positive(t, res.ttft)
				assert.LessOrEqual(t, res.ttft, res.e2e)
			}
			if !tt.stream {
				assert.Equal(t, res.e2e, res.ttft, "non-streaming TTFT is E2E")
			}
		})
	}
}

// The fake server sends the role-only chunk at once and the content after
// the delay: TTFT must wait for the content.
func TestRunnerTTFTWaitsForContent(t *testing.T) {
	const delay = 80 * time.Millisecond
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "non-stream"}[stream], func(t *testing.T) {
			srv := newFakeServer(t, fakeConfig{firstTokenDelay: delay})
			rn := newTestRunner(t, srv.baseURL(), endpointChat, stream, 0)
			res := sendOne(t, context.Background(), rn, endpointChat, stream, 4)
			require.Empty(t, res.kind)
			require.True(t, res.hasTTFT)
			assert.GreaterOrEqual(t, res.ttft, delay)
			assert.GreaterOrEqual(t, res.e2e, res.ttft)
		})
	}
}

func TestRunnerCanceledRun(t *testing.T) {
	srv := newFakeServer(t, fakeConfig{behavior: behaveHang})
	rn := newTestRunner(t, srv.baseURL(), endpointChat, true, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	res := sendOne(t, ctx, rn, endpointChat, true, 4)
	assert.Equal(t, kindCanceled, res.kind)
}

func TestRunnerConnectError(t *testing.T) {
	rn := newTestRunner(t, closedURL(t), endpointChat, true, time.Second)
	res := sendOne(t, context.Background(), rn, endpointChat, true, 4)
	assert.Equal(t, kindConnect, res.kind)
}

func TestRunnerSendsWhatTheAPIExpects(t *testing.T) {
	tests := []struct {
		endpoint, wantPath string
	}{
		{endpointChat, "/v1/chat/completions"},
		{endpointCompletions, "/v1/completions"},
	}
	for _, tt := range tests {
		t.Run(tt.endpoint, func(t *testing.T) {
			srv := newFakeServer(t, fakeConfig{})
			rn := newTestRunner(t, srv.baseURL()+"/", tt.endpoint, true, 0)
			res := sendOne(t, context.Background(), rn, tt.endpoint, true, 3)
			require.Empty(t, res.kind)
			req, auth, path := srv.lastRequest()
			assert.Equal(t, tt.wantPath, path, "trailing slash in --url is ignored")
			assert.Equal(t, "Bearer k-test", auth)
			assert.Equal(t, "sim", req.Model)
			assert.Equal(t, 3, req.MaxTokens)
			assert.True(t, req.Stream)
			require.NotNil(t, req.StreamOptions)
			assert.True(t, req.StreamOptions.IncludeUsage)
		})
	}
}

// Keep-alive must hold: a run that reconnects for every request measures
// TCP handshakes, not the server.
func TestRunnerReusesConnections(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "non-stream"}[stream], func(t *testing.T) {
			srv := newFakeServer(t, fakeConfig{})
			rn := newTestRunner(t, srv.baseURL(), endpointChat, stream, 0)
			for range 10 {
				require.Empty(t, sendOne(t, context.Background(), rn, endpointChat, stream, 3).kind)
			}
			// 1, or 2 if net/http retired one whose write loop was slow to
			// report (50ms, possible under -race on a busy machine).
			assert.LessOrEqual(t, srv.conns.Load(), int64(2))
		})
	}
}

func TestNewRunnerRejectsBadConfig(t *testing.T) {
	tests := []struct{ name, url, endpoint string }{
		{"no scheme", "127.0.0.1:8080/v1", endpointChat},
		{"ftp", "ftp://127.0.0.1/v1", endpointChat},
		{"unknown endpoint", "http://127.0.0.1/v1", "embeddings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newRunner(runnerConfig{baseURL: tt.url, endpoint: tt.endpoint})
			assert.Error(t, err)
		})
	}
}

// BenchmarkRunnerStream measures one streaming request end to end over
// loopback. Allocations include the fake server's, which run in-process.
func BenchmarkRunnerStream(b *testing.B) {
	srv := newFakeServer(b, fakeConfig{})
	rn := newTestRunner(b, srv.baseURL(), endpointChat, true, 0)
	w, err := newSyntheticPrompts(1, 256, 128, 4, 16)
	require.NoError(b, err)
	enc, err := newBodyEncoder(endpointChat, "sim", true, false)
	require.NoError(b, err)
	pool := &bodyPool{}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		body := pool.get()
		body.buf = enc.appendBody(body.buf, w, i)
		if res := rn.do(ctx, body); res.kind != "" {
			b.Fatal(res.kind)
		}
		i++
	}
}

// countingConn counts the writes a connection makes.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// Headers and body leave in one write: a separate header flush would cost
// a syscall and a segment on both sides of every benchmarked request.
func TestRunnerWritesRequestInOneWrite(t *testing.T) {
	srv := newFakeServer(t, fakeConfig{})
	rn := newTestRunner(t, srv.baseURL(), endpointChat, true, 0)
	var writes atomic.Int64
	dial := rn.transport.DialContext
	rn.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	const requests = 3
	for range requests {
		require.Empty(t, sendOne(t, context.Background(), rn, endpointChat, true, 3).kind)
	}
	assert.EqualValues(t, requests, writes.Load())
}
