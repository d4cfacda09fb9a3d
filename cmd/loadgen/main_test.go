package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/mooncake"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// runJSON runs loadgen with args plus --json and returns the decoded report
// and the table printed on stdout.
func runJSON(t *testing.T, args ...string) (jsonReport, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.json")
	var stdout, stderr bytes.Buffer
	require.NoError(t, run(context.Background(), append(args, "--json", path), &stdout, &stderr))
	assert.Empty(t, stderr.String(), "no progress line when stderr is not a terminal")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var rep jsonReport
	require.NoError(t, json.Unmarshal(b, &rep))
	return rep, stdout.String()
}

func TestRunClosedLoopEndToEnd(t *testing.T) {
	const requests, maxTokens = 50, 8
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "non-stream"}[stream], func(t *testing.T) {
			srv := newFakeServer(t, fakeConfig{})
			args := []string{"--url", srv.baseURL(), "--requests", "50", "--concurrency", "4", "--max-tokens", "8"}
			if stream {
				args = append(args, "--stream")
			}
			rep, table := runJSON(t, args...)

			assert.EqualValues(t, requests, srv.requests.Load())
			// One connection a worker, give or take one that net/http retires
			// when its write loop is slow to report (50ms, under -race on a
			// busy machine).
			assert.LessOrEqual(t, srv.conns.Load(), int64(4+2), "connections are kept and reused")
			assert.EqualValues(t, requests, rep.Sent)
			assert.EqualValues(t, requests, rep.Completed)
			assert.Empty(t, rep.Errors)
			assert.Positive(t, rep.DurationS)
			assert.InDelta(t, requests/rep.DurationS, rep.RequestsPerS, 1e-6*rep.RequestsPerS)
			assert.InDelta(t, requests*maxTokens/rep.DurationS, rep.OutputTokensPerS, 1e-6*rep.OutputTokensPerS)
			for _, q := range [][3]float64{{rep.TTFTP50, rep.TTFTP90, rep.TTFTP99}, {rep.E2EP50, rep.E2EP90, rep.E2EP99}} {
				assert.Positive(t, q[0])
				assert.LessOrEqual(t, q[0], q[1])
				assert.LessOrEqual(t, q[1], q[2])
				assert.Less(t, q[2], rep.DurationS, "latencies are in seconds")
			}
			assert.LessOrEqual(t, rep.TTFTP50, rep.E2EP50)
			for _, want := range []string{"requests/s", "output tokens/s", "completed", "TTFT", "E2E", "p99", "closed-loop concurrency=4"} {
				assert.Contains(t, table, want)
			}
		})
	}
}

func TestRunCountsErrorsByKind(t *testing.T) {
	srv := newFakeServer(t, fakeConfig{behavior: behaveStatus, status: 503})
	rep, table := runJSON(t, "--url", srv.baseURL(), "--requests", "10", "--concurrency", "2", "--stream")
	assert.EqualValues(t, 10, rep.Sent)
	assert.Zero(t, rep.Completed)
	assert.Equal(t, map[string]int64{"http_503": 10}, rep.Errors)
	assert.Zero(t, rep.TTFTP99, "no sample, no latency")
	assert.Contains(t, table, "http_503")
}

func TestRunOpenLoopEndToEnd(t *testing.T) {
	srv := newFakeServer(t, fakeConfig{})
	rep, table := runJSON(t, "--url", srv.baseURL(), "--rate", "2000", "--requests", "40", "--stream", "--endpoint", "completions")
	assert.EqualValues(t, 40, rep.Sent+rep.Errors[kindDropped])
	assert.EqualValues(t, rep.Sent, rep.Completed)
	assert.Contains(t, table, "open-loop poisson")
}

func TestRunReplaysTrace(t *testing.T) {
	srv := newFakeServer(t, fakeConfig{})
	trace := filepath.Join("testdata", "trace.jsonl")
	recs, err := mooncake.ReadFile(trace, 0)
	require.NoError(t, err)

	rep, table := runJSON(t, "--url", srv.baseURL(), "--trace", trace, "--time-scale", "100", "--stream")
	assert.EqualValues(t, len(recs), rep.Completed)
	assert.Contains(t, table, "open-loop trace")

	rep, _ = runJSON(t, "--url", srv.baseURL(), "--trace", trace, "--trace-limit", "3", "--concurrency", "2")
	assert.EqualValues(t, 3, rep.Completed)

	rep, _ = runJSON(t, "--url", srv.baseURL(), "--trace", trace, "--requests", "2", "--concurrency", "2")
	assert.EqualValues(t, 2, rep.Completed, "--requests bounds a trace too")
}

func TestRunStopsAtDuration(t *testing.T) {
	srv := newFakeServer(t, fakeConfig{})
	rep, _ := runJSON(t, "--url", srv.baseURL(), "--concurrency", "2", "--duration", "150ms")
	assert.Positive(t, rep.Completed)
	assert.GreaterOrEqual(t, rep.DurationS, 0.15)
	assert.Less(t, rep.DurationS, 5.0)
}

// Interrupting a run cancels the requests in flight and still reports.
func TestRunCanceledContextStillReports(t *testing.T) {
	srv := newFakeServer(t, fakeConfig{behavior: behaveHang})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // interrupt once both workers are waiting on the server
		for srv.requests.Load() < 2 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	path := filepath.Join(t.TempDir(), "report.json")
	var stdout bytes.Buffer
	args := []string{"--url", srv.baseURL(), "--concurrency", "2", "--requests", "5", "--stream", "--json", path}
	require.NoError(t, run(ctx, args, &stdout, &bytes.Buffer{}))
	assert.Contains(t, stdout.String(), "canceled")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var rep jsonReport
	require.NoError(t, json.Unmarshal(b, &rep))
	assert.EqualValues(t, 2, rep.Sent)
	assert.Equal(t, map[string]int64{kindCanceled: 2}, rep.Errors)
}

func TestRunRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"rate and concurrency", []string{"--rate", "5", "--concurrency", "2", "--requests", "1"}},
		{"neither rate nor concurrency", []string{"--requests", "1"}},
		{"no stop condition", []string{"--rate", "5"}},
		{"negative rate", []string{"--rate", "-1", "--requests", "1"}},
		{"bad endpoint", []string{"--concurrency", "1", "--requests", "1", "--endpoint", "embeddings"}},
		{"zero max tokens", []string{"--concurrency", "1", "--requests", "1", "--max-tokens", "0"}},
		{"shared prefix longer than prompt", []string{"--concurrency", "1", "--requests", "1", "--prompt-tokens", "10", "--shared-prefix-tokens", "20"}},
		{"prompt flags with trace", []string{"--trace", "testdata/trace.jsonl", "--prompt-tokens", "10"}},
		{"time scale without trace", []string{"--concurrency", "1", "--requests", "1", "--time-scale", "2"}},
		{"missing trace file", []string{"--trace", "testdata/absent.jsonl"}},
		{"bad url", []string{"--concurrency", "1", "--requests", "1", "--url", "localhost:8080"}},
		{"positional argument", []string{"--concurrency", "1", "--requests", "1", "extra"}},
		{"unknown flag", []string{"--concurrency", "1", "--requests", "1", "--qps", "3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := run(context.Background(), tt.args, &stdout, &bytes.Buffer{})
			assert.Error(t, err)
			assert.Empty(t, stdout.String(), "nothing sent, nothing reported")
		})
	}
}

func TestRunHelp(t *testing.T) {
	var stderr bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"--help"}, &bytes.Buffer{}, &stderr))
	for _, flag := range []string{"--url", "--rate", "--concurrency", "--trace", "--json", "--stream"} {
		assert.Contains(t, stderr.String(), flag)
	}
}
