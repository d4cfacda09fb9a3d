package handlers

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The direct request line is byte for byte what slog's JSONHandler writes
// for the same attributes, whatever the strings hold.
func TestRequestLineMatchesSlogJSON(t *testing.T) {
	at := time.Date(2026, 11, 30, 19, 4, 5, 120_999_999, time.FixedZone("x", 3600))
	base := requestRecord{id: "req-1", partition: "default", model: "sim", worker: "w0", decision: "owner_hit", status: 200, attempts: 1}
	hostile := "q\"uo\\te\n\r\t\x00\x1f<>&é\u2028\u2029\xff\xfe🙂end"
	cases := []struct {
		name     string
		mod      func(r *requestRecord)
		level    slog.Level
		duration time.Duration
	}{
		{"plain", func(*requestRecord) {}, slog.LevelInfo, 2345 * time.Microsecond},
		{"stream with ttft", func(r *requestRecord) { r.stream, r.ttft = true, 150*time.Microsecond }, slog.LevelInfo, 3 * time.Second},
		{"error at warn", func(r *requestRecord) { r.status, r.err, r.attempts = 502, "upstream: "+hostile, 3 }, slog.LevelWarn, time.Millisecond},
		{"hostile strings", func(r *requestRecord) { r.id, r.model, r.partition, r.worker = hostile, hostile, "", "<w>" }, slog.LevelInfo, 0},
		{"tiny and huge durations", func(r *requestRecord) { r.ttft = time.Microsecond }, slog.LevelInfo, 100000 * time.Hour},
		{"client went away", func(r *requestRecord) { r.status, r.model = statusClientClosed, "unknown" }, slog.LevelInfo, 999 * time.Microsecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := base
			tc.mod(&rec)
			var want bytes.Buffer
			r := slog.NewRecord(at, tc.level, "request", 0)
			r.AddAttrs(requestAttrs(&rec, tc.duration)...)
			require.NoError(t, slog.NewJSONHandler(&want, nil).Handle(context.Background(), r))
			got := requestLine{time: at, level: tc.level, rec: &rec, duration: tc.duration}.append(nil)
			assert.Equal(t, want.String(), string(got))
		})
	}
}

// Float formatting follows encoding/json, which slog calls for floats.
func TestAppendJSONFloat(t *testing.T) {
	for _, f := range []float64{0, 1, 2.345, 1e-7, 1.5e-9, 1e21, 123456789.123, -0.5, 1e20} {
		var want bytes.Buffer
		r := slog.NewRecord(time.Time{}, slog.LevelInfo, "", 0)
		r.AddAttrs(slog.Float64("f", f))
		require.NoError(t, slog.NewJSONHandler(&want, &slog.HandlerOptions{ReplaceAttr: dropBuiltins}).Handle(context.Background(), r))
		assert.Equal(t, want.String(), `{"f":`+string(appendJSONFloat(nil, f))+"}\n", "%g", f)
	}
}

func dropBuiltins(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
		return slog.Attr{}
	}
	return a
}

// The gateway writes request lines directly when RequestLog is set, and
// only at levels its Logger enables.
func TestFinishWritesRequestLinesDirectly(t *testing.T) {
	var out lockedBuffer
	g := &Gateway{opts: Options{LogRequests: true, RequestLog: &out, Now: time.Now,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))}, metrics: newMetrics(prometheus.NewRegistry())}
	ok := requestRecord{id: "a", model: "sim", status: 200, start: time.Now()}
	failed := requestRecord{id: "b", model: "sim", status: 502, start: time.Now(), err: "boom"}
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { g.finish(&ok); g.finish(&failed) })
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	assert.Len(t, lines, 50, "info lines are below the logger's level; warn lines are written, whole")
	for _, l := range lines {
		assert.True(t, strings.HasPrefix(l, `{"time":"`) && strings.HasSuffix(l, `"error":"boom"}`), l)
		assert.Contains(t, l, `"level":"WARN","msg":"request","request_id":"b"`)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// One request's log line, through slog's JSON handler and written directly.
func BenchmarkRequestLog(b *testing.B) {
	rec := requestRecord{id: "0a1b2c3d4e5f6a7b", partition: "default", model: "meta-llama/Llama-3.1-8B-Instruct", worker: "vllm-3",
		decision: "owner_hit", status: 200, attempts: 1, stream: true, ttft: 123456 * time.Microsecond, start: time.Now()}
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	b.Run("slog", func(b *testing.B) {
		g := &Gateway{opts: Options{LogRequests: true, Logger: logger, Now: time.Now}, metrics: newMetrics(prometheus.NewRegistry())}
		b.ReportAllocs()
		for b.Loop() {
			g.finish(&rec)
		}
	})
	b.Run("direct", func(b *testing.B) {
		g := &Gateway{opts: Options{LogRequests: true, Logger: logger, RequestLog: io.Discard, Now: time.Now}, metrics: newMetrics(prometheus.NewRegistry())}
		b.ReportAllocs()
		for b.Loop() {
			g.finish(&rec)
		}
	})
}
