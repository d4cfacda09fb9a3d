package workers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBreaker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBreaker(3, 10*time.Second)

	assert.True(t, b.Allows(t0))
	assert.False(t, b.Failure(t0))
	assert.False(t, b.Failure(t0))
	b.Success()
	assert.False(t, b.Failure(t0), "success resets the count")
	assert.False(t, b.Failure(t0))
	assert.True(t, b.Failure(t0), "third consecutive failure opens")
	assert.Equal(t, BreakerOpen, b.State(t0))
	assert.False(t, b.Allows(t0.Add(9*time.Second)))
	assert.False(t, b.Begin(t0.Add(9*time.Second)))

	t1 := t0.Add(10 * time.Second)
	assert.Equal(t, BreakerHalfOpen, b.State(t1))
	assert.True(t, b.Allows(t1))
	assert.True(t, b.Begin(t1), "one trial")
	assert.False(t, b.Allows(t1), "the trial is taken")
	assert.False(t, b.Begin(t1))
	assert.True(t, b.Failure(t1), "a failed trial re-opens")
	assert.Equal(t, BreakerOpen, b.State(t1))

	t2 := t1.Add(10 * time.Second)
	assert.True(t, b.Begin(t2))
	b.Neutral()
	assert.True(t, b.Begin(t2), "a neutral end frees the trial slot")
	b.Success()
	assert.Equal(t, BreakerClosed, b.State(t2))
}

func TestBreakerDisabled(t *testing.T) {
	b := NewBreaker(0, time.Second)
	now := time.Now()
	for range 100 {
		b.Failure(now)
	}
	assert.True(t, b.Allows(now))
	assert.True(t, b.Begin(now))
	var nilBreaker *Breaker
	assert.True(t, nilBreaker.Allows(now))
}
