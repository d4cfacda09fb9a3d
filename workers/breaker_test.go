package workers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func begin(t *testing.T, b *Breaker, now time.Time) Ticket {
	t.Helper()
	tk, ok := b.Begin(now)
	require.True(t, ok)
	return tk
}

func TestBreakerOpensAndATrialDecides(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBreaker(3, 10*time.Second)

	b.End(begin(t, b, t0), HealthFailure, t0)
	b.End(begin(t, b, t0), HealthFailure, t0)
	b.End(begin(t, b, t0), HealthSuccess, t0)
	b.End(begin(t, b, t0), HealthFailure, t0)
	b.End(begin(t, b, t0), HealthFailure, t0)
	assert.Equal(t, BreakerClosed, b.State(t0), "a success reset the count")
	assert.True(t, b.End(begin(t, b, t0), HealthFailure, t0), "third consecutive failure opens")
	assert.False(t, b.Allows(t0.Add(9*time.Second)))
	_, ok := b.Begin(t0.Add(9 * time.Second))
	assert.False(t, ok)

	t1 := t0.Add(10 * time.Second)
	assert.Equal(t, BreakerHalfOpen, b.State(t1))
	trial := begin(t, b, t1)
	assert.False(t, b.Allows(t1), "the one trial is taken")
	_, ok = b.Begin(t1)
	assert.False(t, ok)
	assert.True(t, b.End(trial, HealthFailure, t1), "a failed trial re-opens")

	t2 := t1.Add(10 * time.Second)
	trial = begin(t, b, t2)
	b.End(trial, HealthNeutral, t2)
	trial = begin(t, b, t2)
	b.End(trial, HealthSuccess, t2)
	assert.Equal(t, BreakerClosed, b.State(t2))
}

// Outcomes of requests that began in another state are ignored.
func TestBreakerIgnoresOutcomesFromAnotherEpoch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBreaker(2, 10*time.Second)
	long := begin(t, b, t0) // a long request, begun while closed
	b.End(begin(t, b, t0), HealthFailure, t0)
	b.End(begin(t, b, t0), HealthFailure, t0)
	require.Equal(t, BreakerOpen, b.State(t0))

	b.End(long, HealthSuccess, t0.Add(time.Second))
	assert.Equal(t, BreakerOpen, b.State(t0.Add(time.Second)), "an old success does not close an open circuit")
	b.End(long, HealthFailure, t0.Add(9*time.Second))
	assert.Equal(t, BreakerHalfOpen, b.State(t0.Add(10*time.Second)), "an old failure does not extend the open period")

	t1 := t0.Add(10 * time.Second)
	trial := begin(t, b, t1)
	b.End(long, HealthNeutral, t1)
	_, ok := b.Begin(t1)
	assert.False(t, ok, "only the trial's own outcome frees the trial slot")
	b.End(trial, HealthSuccess, t1)
	assert.Equal(t, BreakerClosed, b.State(t1))
}

func TestBreakerDisabled(t *testing.T) {
	b := NewBreaker(0, time.Second)
	now := time.Now()
	for range 100 {
		tk, ok := b.Begin(now)
		require.True(t, ok)
		b.End(tk, HealthFailure, now)
	}
	assert.True(t, b.Allows(now))
	var nilBreaker *Breaker
	assert.True(t, nilBreaker.Allows(now))
}
