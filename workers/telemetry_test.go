package workers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// telemetryCheckSample asserts what every parsed sample must satisfy,
// whatever the input: the fuzz targets lean on it.
func telemetryCheckSample(t *testing.T, s Sample) {
	t.Helper()
	if !assert.NotEmpty(t, s.Ranks, "a sample without ranks must be an error") {
		return
	}
	assert.True(t, s.At.IsZero(), "parsers do not stamp the time")
	running, waiting, maxRunning, kv := 0, 0, 0, -1.0
	everyMax := true
	for i, r := range s.Ranks {
		if i > 0 {
			assert.Greater(t, r.Rank, s.Ranks[i-1].Rank, "ranks sorted and distinct")
		}
		assert.GreaterOrEqual(t, r.Rank, 0)
		assert.GreaterOrEqual(t, r.Running, 0)
		assert.GreaterOrEqual(t, r.Waiting, 0)
		assert.GreaterOrEqual(t, r.MaxRunning, 0)
		assert.True(t, r.KVUsage == -1 || (r.KVUsage >= 0 && r.KVUsage <= 1), "rank KV usage %v", r.KVUsage)
		running += r.Running
		waiting += r.Waiting
		maxRunning += r.MaxRunning
		everyMax = everyMax && r.MaxRunning > 0
		kv = max(kv, r.KVUsage)
	}
	if !everyMax {
		maxRunning = 0
	}
	assert.Equal(t, running, s.Running)
	assert.Equal(t, waiting, s.Waiting)
	assert.Equal(t, maxRunning, s.MaxRunning)
	assert.Equal(t, kv, s.KVUsage)
}

func TestSampleFresh(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		s      Sample
		now    time.Time
		maxAge time.Duration
		want   bool
	}{
		{"just polled", Sample{At: at}, at, time.Second, true},
		{"at the limit", Sample{At: at}, at.Add(time.Second), time.Second, true},
		{"past the limit", Sample{At: at}, at.Add(time.Second + time.Nanosecond), time.Second, false},
		{"stamped after the caller read its clock", Sample{At: at}, at.Add(-time.Millisecond), time.Second, true},
		{"never polled", Sample{}, at, time.Hour, false},
		{"zero max age is only the same instant", Sample{At: at}, at.Add(time.Nanosecond), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.s.Fresh(tt.now, tt.maxAge))
		})
	}
}

func TestTelemetrySampleMaxRunningNeedsEveryRank(t *testing.T) {
	s, err := telemetrySample(map[int]RankLoad{
		0: {Rank: 0, Running: 1, KVUsage: -1, MaxRunning: 32},
		1: {Rank: 1, Running: 2, KVUsage: -1},
	}, 0, SourceSGLangLoads)
	assert.NoError(t, err)
	assert.Equal(t, 0, s.MaxRunning, "a capacity known for one rank only is unknown")
	assert.Equal(t, -1.0, s.KVUsage)

	s, err = telemetrySample(map[int]RankLoad{
		0: {Rank: 0, KVUsage: 0.2, MaxRunning: 32},
		1: {Rank: 1, KVUsage: 0.7, MaxRunning: 48},
	}, 2, SourceSGLangLoads)
	assert.NoError(t, err)
	assert.Equal(t, 80, s.MaxRunning)
	assert.Equal(t, 0.7, s.KVUsage)
	assert.True(t, s.Complete)

	_, err = telemetrySample(map[int]RankLoad{}, 0, SourceSGLangLoads)
	assert.ErrorIs(t, err, ErrTelemetryFormat)
}
