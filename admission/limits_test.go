package admission

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestQueueFullGivesRetryAfter(t *testing.T) {
	cfg := twoPartitions(ModeEnforce, 1, 1)
	cfg.MaxQueuePerPartition = 2
	cfg.QueueTimeout = 30 * time.Second
	s, _ := newScheduler(t, cfg, newSlots(0), nil)
	var got collector
	t1 := s.Submit(Request{ID: "1", Partition: "a", Cost: 10}, got.done)
	t2 := s.Submit(Request{ID: "2", Partition: "a", Cost: 10}, got.done)
	require.NotNil(t, t1)
	require.NotNil(t, t2)

	s.Submit(Request{ID: "3", Partition: "a", Cost: 10}, got.done)
	require.Len(t, got.errs, 1)
	var full *QueueFullError
	require.ErrorAs(t, got.errs[0], &full)
	assert.ErrorIs(t, got.errs[0], ErrQueueFull)
	assert.Equal(t, "a", full.Partition)
	assert.Equal(t, 2, full.Queued)
	assert.GreaterOrEqual(t, full.RetryAfter, time.Second)
	assert.LessOrEqual(t, full.RetryAfter, cfg.QueueTimeout, "by the timeout every waiting request has left")
	assert.EqualValues(t, 1, s.decisionCount("a", decisionRejectedQueueFull))

	_, err := s.Admit(context.Background(), Request{ID: "4", Partition: "a"})
	assert.ErrorIs(t, err, ErrQueueFull, "Admit refuses the same way")
	s.Submit(Request{ID: "5", Partition: "b"}, got.done)
	assert.Len(t, got.errs, 1, "the limit is per partition: b still queues")

	for _, tk := range s.queuedTickets() {
		assert.True(t, tk.Cancel())
	}
	assertIdle(t, s)
}

func (s *Scheduler) queuedTickets() []*Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Ticket
	for _, ps := range s.order {
		for t := ps.head; t != nil; t = t.next {
			out = append(out, t)
		}
	}
	return out
}

func TestRetryAfterEstimate(t *testing.T) {
	tests := []struct {
		name    string
		queued  int
		rate    float64
		timeout time.Duration
		want    time.Duration
	}{
		{"queue over the dispatch rate", 10, 2, time.Minute, 5 * time.Second},
		{"rounded up to whole seconds", 3, 2, time.Minute, 2 * time.Second},
		{"never below one second", 1, 100, time.Minute, time.Second},
		{"all at once is one second", 50, math.Inf(1), time.Minute, time.Second},
		{"at most the queue timeout", 1000, 1, 30 * time.Second, 30 * time.Second},
		{"a sub-second timeout still says one second", 1000, 1, 200 * time.Millisecond, time.Second},
		{"unknown rate: the queue timeout", 5, 0, 20 * time.Second, 20 * time.Second},
		{"no timeout: at most a minute", 1000, 1, 0, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, retryAfter(tt.queued, tt.rate, tt.timeout))
		})
	}

	t.Run("the rate decays while the queue stands still", func(t *testing.T) {
		var d dispatchRate
		for i := range 20 {
			d.record(epoch.Add(time.Duration(i) * time.Second / 4)) // 4 per second
		}
		last := epoch.Add(19 * time.Second / 4)
		assert.InDelta(t, 4, d.perSecond(last), 0.3)
		assert.Less(t, d.perSecond(last.Add(10*time.Second)), 2.0)
	})
}

func TestQueueTimeout(t *testing.T) {
	clock := newFakeClock()
	cfg := twoPartitions(ModeEnforce, 1, 1)
	cfg.QueueTimeout = 2 * time.Second
	s, _ := newScheduler(t, cfg, newSlots(0), clock)
	errc := make(chan error, 1)
	go func() {
		_, err := s.Admit(context.Background(), Request{ID: "1", Partition: "b", Cost: 10})
		errc <- err
	}()
	require.Eventually(t, func() bool { return s.Snapshot().Partitions[1].Queued == 1 }, 5*time.Second, time.Millisecond)
	clock.Advance(time.Second)
	select {
	case err := <-errc:
		t.Fatalf("returned before the timeout: %v", err)
	default:
	}
	clock.Advance(time.Second)
	assert.ErrorIs(t, <-errc, ErrQueueTimeout)
	assert.EqualValues(t, 1, s.decisionCount("b", decisionTimeout))
	assertIdle(t, s)
}

func TestCancelledWhileQueuedLeavesNoTrace(t *testing.T) {
	t.Run("Admit returns the context's error and restores every count", func(t *testing.T) {
		s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), newSlots(0), nil)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := s.Admit(ctx, Request{ID: "1", Partition: "a", Cost: 10})
			errc <- err
		}()
		require.Eventually(t, func() bool { return s.Snapshot().Partitions[0].Queued == 1 }, 5*time.Second, time.Millisecond)
		depth, _ := s.gauges("a")
		require.EqualValues(t, 1, depth)
		cancel()
		assert.ErrorIs(t, <-errc, context.Canceled)
		assert.EqualValues(t, 1, s.decisionCount("a", decisionCancelled))
		assertIdle(t, s)
		s.mu.Lock()
		assert.Zero(t, s.parts["a"].lastFinish, "the partition's finish tag is rolled back")
		s.mu.Unlock()
	})

	t.Run("an already cancelled context does not queue", func(t *testing.T) {
		s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), newSlots(0), nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := s.Admit(ctx, Request{ID: "1", Partition: "a"})
		assert.ErrorIs(t, err, context.Canceled)
		assertIdle(t, s)
	})

	// Withdrawing a queued request must leave the dispatch order exactly as
	// if it had never come: same partition behind it, other partitions around.
	withdrawn := []struct {
		name string
		at   int // index among a's requests of the one withdrawn
	}{{"the tail of its queue", 2}, {"the middle of its queue", 1}, {"the head of its queue", 0}}
	for _, w := range withdrawn {
		t.Run("withdrawing "+w.name+" changes no later dispatch", func(t *testing.T) {
			assert.Equal(t, withdrawalScenario(t, w.at, -1), withdrawalScenario(t, -1, w.at))
		})
	}
}

// withdrawalScenario queues six b's and three a's on a full fleet, cancels
// a's request at index cancel, never submits the one at index skip, adds a
// late a, opens the fleet and returns the dispatch order.
func withdrawalScenario(t *testing.T, cancel, skip int) []string {
	fleet := newSlots(0)
	s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), fleet, nil)
	var got collector
	for i := range 6 {
		s.Submit(Request{ID: fmt.Sprint("b", i), Partition: "b", Cost: 100}, got.done)
	}
	var tickets []*Ticket
	for i := range 3 {
		if i != skip {
			tickets = append(tickets, s.Submit(Request{ID: fmt.Sprint("a", i), Partition: "a", Cost: 100}, got.done))
		}
	}
	if cancel >= 0 {
		require.True(t, tickets[cancel].Cancel())
		require.False(t, tickets[cancel].Cancel(), "a ticket cancels once")
	}
	s.Submit(Request{ID: "a-late", Partition: "a", Cost: 100}, got.done)
	fleet.total.Store(100)
	s.Kick()
	ids := make([]string, 0, len(got.credits))
	for _, c := range got.credits {
		ids = append(ids, c.RequestID())
		c.Release(OutcomeSuccess, 0)
	}
	require.Len(t, ids, 9)
	assertIdle(t, s)
	return ids
}

func TestUnknownPartition(t *testing.T) {
	s, _ := newScheduler(t, twoPartitions(ModeEnforce, 1, 1), newSlots(4), nil)
	_, err := s.Admit(context.Background(), Request{ID: "1", Partition: "nope"})
	assert.ErrorIs(t, err, ErrUnknownPartition)
	c, err := s.Admit(context.Background(), Request{ID: "2"})
	require.NoError(t, err)
	assert.Equal(t, "a", c.Partition(), "empty is the default partition")
	c.Release(OutcomeSuccess, 0)
	assert.False(t, errors.Is(err, ErrQueueFull))
	assertIdle(t, s)
}
