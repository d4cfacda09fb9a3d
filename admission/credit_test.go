package admission

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func admitOne(t *testing.T, s *Scheduler, r Request) *Credit {
	t.Helper()
	c, err := s.Admit(context.Background(), r)
	require.NoError(t, err)
	return c
}

var req1 = Request{ID: "req-1", Model: "m", Partition: "b", Cost: 10}

func TestRedeemChecksTheBinding(t *testing.T) {
	s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), newSlots(4), nil)
	c := admitOne(t, s, req1)
	mismatches := []struct {
		name                        string
		requestID, model, partition string
	}{
		{"another request id", "req-2", "m", "b"},
		{"another model", "req-1", "other", "b"},
		{"another partition", "req-1", "m", "a"},
		{"empty binding", "", "", ""},
	}
	for _, m := range mismatches {
		t.Run(m.name, func(t *testing.T) {
			p, err := c.Redeem(m.requestID, m.model, m.partition)
			assert.ErrorIs(t, err, ErrProofMismatch)
			assert.Nil(t, p)
		})
	}
	t.Run("the matching binding redeems once, and its proof claims once", func(t *testing.T) {
		p, err := c.Redeem("req-1", "m", "b")
		require.NoError(t, err, "a mismatch consumes nothing")
		assert.Equal(t, "req-1", p.RequestID())
		assert.Equal(t, "m", p.Model())
		assert.Equal(t, "b", p.Partition())
		assert.Equal(t, s.Generation(), p.Generation())
		_, err = c.Redeem("req-1", "m", "b")
		assert.ErrorIs(t, err, ErrProofReplayed)
		require.NoError(t, p.Claim())
		assert.ErrorIs(t, p.Claim(), ErrProofReplayed)
	})
	c.Release(OutcomeSuccess, 0)
	assertIdle(t, s)
}

func TestProofIsStaleAfterReconfigure(t *testing.T) {
	cfg := twoPartitions(ModeEnforce, 1, 1)
	s, _ := newScheduler(t, cfg, newSlots(4), nil)
	before := admitOne(t, s, req1)
	redeemedBefore := admitOne(t, s, Request{ID: "req-2", Model: "m", Partition: "a"})
	p, err := redeemedBefore.Redeem("req-2", "m", "a")
	require.NoError(t, err)
	gen := s.Generation()

	cfg.Partitions[1].Weight = 5
	require.NoError(t, s.Reconfigure(cfg))
	assert.Equal(t, gen+1, s.Generation())

	_, err = before.Redeem("req-1", "m", "b")
	assert.ErrorIs(t, err, ErrProofStale)
	assert.ErrorIs(t, p.Claim(), ErrProofStale, "a proof redeemed before the reload is stale too")
	after := admitOne(t, s, Request{ID: "req-3", Model: "m", Partition: "b"})
	_, err = after.Redeem("req-3", "m", "b")
	assert.NoError(t, err)

	// The credits themselves keep working until released.
	for _, c := range []*Credit{before, redeemedBefore, after} {
		c.Release(OutcomeSuccess, 5)
	}
	assert.EqualValues(t, 10, s.Snapshot().Partitions[1].ServedTokens)
	assertIdle(t, s)
}

func TestProofExpires(t *testing.T) {
	clock := newFakeClock()
	cfg := twoPartitions(ModeEnforce, 1, 1)
	cfg.CreditTTL = 5 * time.Second
	s, _ := newScheduler(t, cfg, newSlots(4), clock)

	t.Run("at redemption", func(t *testing.T) {
		c := admitOne(t, s, req1)
		defer c.Release(OutcomeSuccess, 0)
		clock.Advance(5 * time.Second)
		_, err := c.Redeem("req-1", "m", "b")
		require.NoError(t, err, "still valid at exactly the TTL")
	})
	t.Run("after the TTL", func(t *testing.T) {
		c := admitOne(t, s, req1)
		defer c.Release(OutcomeSuccess, 0)
		clock.Advance(5*time.Second + time.Nanosecond)
		_, err := c.Redeem("req-1", "m", "b")
		assert.ErrorIs(t, err, ErrProofExpired)
	})
	t.Run("at claim", func(t *testing.T) {
		c := admitOne(t, s, req1)
		defer c.Release(OutcomeSuccess, 0)
		clock.Advance(time.Second)
		p, err := c.Redeem("req-1", "m", "b")
		require.NoError(t, err)
		clock.Advance(5 * time.Second)
		assert.ErrorIs(t, p.Claim(), ErrProofExpired)
		assert.ErrorIs(t, p.Claim(), ErrProofReplayed, "a failed claim consumes the proof")
	})
	assertIdle(t, s)
}

func TestProofOfAReleasedCreditIsCancelled(t *testing.T) {
	s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), newSlots(4), nil)
	c := admitOne(t, s, req1)
	p, err := c.Redeem("req-1", "m", "b")
	require.NoError(t, err)
	c.Release(OutcomeCancelled, 0)
	assert.ErrorIs(t, p.Claim(), ErrProofCancelled)

	c2 := admitOne(t, s, req1)
	c2.Release(OutcomeCancelled, 0)
	_, err = c2.Redeem("req-1", "m", "b")
	assert.ErrorIs(t, err, ErrProofCancelled)
	assertIdle(t, s)
}

func TestClaimExactlyOnceUnderConcurrency(t *testing.T) {
	s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), newSlots(4), nil)
	for round := range 20 {
		c := admitOne(t, s, req1)
		p, err := c.Redeem("req-1", "m", "b")
		require.NoError(t, err)
		start := make(chan struct{})
		errs := make([]error, 64)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				<-start
				errs[i] = p.Claim()
			})
		}
		close(start)
		wg.Wait()
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
			} else {
				assert.ErrorIs(t, err, ErrProofReplayed)
			}
		}
		assert.Equal(t, 1, wins, "round %d", round)
		c.Release(OutcomeSuccess, 0)
	}
	assertIdle(t, s)
}

func TestProofErrorsAreDistinct(t *testing.T) {
	all := []error{ErrInvalidAPIKey, ErrUnknownPartition, ErrQueueFull, ErrQueueTimeout,
		ErrProofMismatch, ErrProofStale, ErrProofExpired, ErrProofCancelled, ErrProofReplayed}
	for i, a := range all {
		for j, b := range all {
			assert.Equal(t, i == j, errors.Is(a, b), "%v vs %v", a, b)
		}
	}
}

func TestReleaseIsIdempotent(t *testing.T) {
	fleet := newSlots(1)
	s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), fleet, nil)
	c := admitOne(t, s, req1)
	var got collector
	s.Submit(Request{ID: "next", Partition: "b"}, got.done)
	require.Empty(t, got.credits, "the fleet is full")

	for range 3 {
		c.Release(OutcomeFailure, 40)
	}
	require.Len(t, got.credits, 1, "the released slot went to the waiting request")
	snap := s.Snapshot()
	assert.EqualValues(t, 40, snap.Partitions[1].ServedTokens, "served once")
	assert.EqualValues(t, 1, snap.Partitions[1].Failed)
	assert.Equal(t, 1, snap.Partitions[1].Inflight)
	assert.Equal(t, 1, snap.Outstanding, "counted down once: only the new credit")
	assert.EqualValues(t, 40, testutil.ToFloat64(s.metrics.served.WithLabelValues("b")))

	got.credits[0].Routed()
	got.credits[0].Routed()
	assert.Zero(t, s.Snapshot().Outstanding, "routed once")
	got.credits[0].Release(OutcomeSuccess, 0)
	got.credits[0].Release(OutcomeSuccess, 0)
	assertIdle(t, s)

	var nilCredit *Credit
	assert.NotPanics(t, func() { nilCredit.Release(OutcomeSuccess, 1); nilCredit.Routed() })
}

func TestReleaseInADeferredCallDuringPanic(t *testing.T) {
	s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), newSlots(4), nil)
	handle := func() {
		c := admitOne(t, s, req1)
		defer c.Release(OutcomeFailure, 0)
		c.Routed()
		panic("handler bug")
	}
	middleware := func() (recovered any) {
		defer func() { recovered = recover() }()
		handle()
		return nil
	}
	assert.Equal(t, "handler bug", middleware())
	snap := s.Snapshot()
	assert.EqualValues(t, 1, snap.Partitions[1].Failed)
	assertIdle(t, s)
}

// The hand-off: a credit holds its slot until routing's reservation holds
// it, and at no instant does nobody hold it.
func TestRoutedHandsTheSlotToRouting(t *testing.T) {
	fleet := newSlots(1)
	s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), fleet, nil)
	c := admitOne(t, s, req1)
	var got collector
	s.Submit(Request{ID: "waiting", Partition: "a"}, got.done)
	free := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.freeLocked()
	}

	assert.Zero(t, free(), "the credit holds the only slot")
	fleet.busy.Add(1) // routing reserves
	assert.Equal(t, -1, free(), "between reservation and Routed the slot counts twice: late, never early")
	s.Kick()
	assert.Empty(t, got.credits)
	c.Routed()
	assert.Zero(t, free(), "counted once, by routing")
	assert.Empty(t, got.credits, "no double slot, no dispatch")
	fleet.finish(c, 10)
	require.Len(t, got.credits, 1, "the finished request's slot goes to the waiting one")

	// Routing failed: no Routed, and Release gives the slot back.
	fleet.total.Store(1)
	var next collector
	s.Submit(Request{ID: "after", Partition: "b"}, next.done)
	require.Empty(t, next.credits)
	got.credits[0].Release(OutcomeFailure, 0)
	require.Len(t, next.credits, 1)
	next.credits[0].Release(OutcomeSuccess, 0)
	assertIdle(t, s)
}
