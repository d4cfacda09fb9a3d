package main

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPercentileIsNearestRank(t *testing.T) {
	s := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Second
		}
		return out
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   float64
	}{
		{"empty", nil, 0.5, 0},
		{"one", s(3), 0.99, 3},
		{"median of four", s(1, 2, 3, 4), 0.5, 2},
		{"p90 of ten", s(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, 9},
		{"p99 of ten", s(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, percentile(tt.sorted, tt.p))
		})
	}
}

func TestRunningBalance(t *testing.T) {
	b := runningBalance{running: make([]int, 4)}
	assert.Zero(t, b.imbalance(), "nothing ran")

	b.set(time.Second, 0, 4) // [4 0 0 0] from 1 s: max/mean 4
	b.set(2*time.Second, 1, 4)
	b.set(2*time.Second, 2, 4)
	b.set(2*time.Second, 3, 4) // [4 4 4 4] from 2 s: 1
	b.set(4*time.Second, 0, 0)
	b.set(4*time.Second, 1, 0)
	b.set(4*time.Second, 2, 0)
	b.set(4*time.Second, 3, 0) // idle from 4 s: not counted
	b.advance(10 * time.Second)
	assert.InDelta(t, (4*1+1*2)/3.0, b.imbalance(), 1e-12)
}

func TestWakeQueueMatchesAScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const engines = 13
	q := newWakeQueue(engines)
	at := make([]time.Duration, engines)
	busy := make([]bool, engines)
	for range 5000 {
		e := rng.IntN(engines)
		on := rng.IntN(4) > 0
		when := time.Duration(rng.IntN(50))
		q.set(e, when, on)
		at[e], busy[e] = when, on

		want, wantAt, wantOK := -1, time.Duration(0), false
		for i := range engines {
			if busy[i] && (!wantOK || at[i] < wantAt) {
				want, wantAt, wantOK = i, at[i], true
			}
		}
		got, gotAt, ok := q.peek()
		if !assert.Equal(t, wantOK, ok) {
			return
		}
		if ok && !(assert.Equal(t, want, got, "ties go to the lower engine") && assert.Equal(t, wantAt, gotAt)) {
			return
		}
	}
}
