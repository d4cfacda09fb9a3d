package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	oneToHundred := make([]int, 100)
	for i := range oneToHundred {
		oneToHundred[i] = i + 1
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"single", ms(7), 0.99, 7 * time.Millisecond},
		{"median of odd", ms(1, 2, 3), 0.5, 2 * time.Millisecond},
		{"median of even interpolates", ms(1, 2, 3, 4), 0.5, 2500 * time.Microsecond},
		{"p0 is min", ms(3, 5, 9), 0, 3 * time.Millisecond},
		{"p100 is max", ms(3, 5, 9), 1, 9 * time.Millisecond},
		{"p90 of 1..100", ms(oneToHundred...), 0.9, 90100 * time.Microsecond},
		{"p99 of 1..100", ms(oneToHundred...), 0.99, 99010 * time.Microsecond},
		{"p99 of two", ms(10, 20), 0.99, 19900 * time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, percentile(tt.sorted, tt.q))
		})
	}
}

func TestQuantilesOfSortsACopy(t *testing.T) {
	samples := []time.Duration{5, 1, 4, 2, 3}
	q := quantilesOf(samples)
	assert.Equal(t, time.Duration(3), q.p50)
	assert.Equal(t, []time.Duration{5, 1, 4, 2, 3}, samples, "recorded order untouched")
}

func TestRecorderSummary(t *testing.T) {
	r := newRecorder(4)
	for _, res := range []result{
		{e2e: 40 * time.Millisecond, ttft: 10 * time.Millisecond, hasTTFT: true, outputTokens: 8},
		{e2e: 60 * time.Millisecond, ttft: 20 * time.Millisecond, hasTTFT: true, outputTokens: 12},
		{e2e: 50 * time.Millisecond, outputTokens: 0}, // stream without content
		{kind: "http_503"},
		{kind: kindTimeout},
		{kind: "http_503"},
	} {
		r.markSent()
		r.record(res)
	}
	r.fail(kindDropped)

	s := r.summarize(2 * time.Second)
	assert.EqualValues(t, 6, s.sent)
	assert.EqualValues(t, 3, s.completed)
	assert.EqualValues(t, 20, s.outputTokens)
	assert.Equal(t, map[string]int64{"http_503": 2, kindTimeout: 1, kindDropped: 1}, s.errors)
	assert.EqualValues(t, 4, s.errorCount())
	assert.EqualValues(t, 4, r.failed.Load())
	assert.InDelta(t, 1.5, s.requestsPerSecond(), 1e-9)
	assert.InDelta(t, 10, s.outputTokensPerSecond(), 1e-9)
	assert.Equal(t, 15*time.Millisecond, s.ttft.p50, "only requests with content have a TTFT")
	assert.Equal(t, 50*time.Millisecond, s.e2e.p50)
}

func TestPerSecondOfNothing(t *testing.T) {
	assert.Zero(t, perSecond(10, 0))
	assert.Zero(t, summary{}.requestsPerSecond())
}
