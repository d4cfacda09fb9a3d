package admission

import (
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeClock is a Clock that moves only when told; due timers fire in
// Advance, in the caller's goroutine.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	c       *fakeClock
	at      time.Time
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: epoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Advance moves the clock by d and runs the timers that came due, in order.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due, rest []*fakeTimer
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.now):
			t.stopped = true
			due = append(due, t)
		default:
			rest = append(rest, t)
		}
	}
	c.timers = rest
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		t.f()
	}
}

var _ Clock = (*fakeClock)(nil)

// slots is a fleet of a fixed number of request slots; busy counts the
// requests routed to it (what a gateway's telemetry and reservations show).
type slots struct {
	total atomic.Int64
	busy  atomic.Int64
	calls atomic.Int64
}

func newSlots(n int) *slots {
	s := &slots{}
	s.total.Store(int64(n))
	return s
}

func (s *slots) Available() int {
	s.calls.Add(1)
	return int(s.total.Load() - s.busy.Load())
}

var _ Capacity = (*slots)(nil)

// route is what the gateway does with a credit: reserve a slot, then hand
// the credit over.
func (s *slots) route(c *Credit) {
	s.busy.Add(1)
	c.Routed()
}

// finish ends a routed request: the slot first, then the credit.
func (s *slots) finish(c *Credit, served int) {
	s.busy.Add(-1)
	c.Release(OutcomeSuccess, served)
}

func twoPartitions(mode Mode, wa, wb float64) Config {
	return Config{
		Mode:             mode,
		Partitions:       []Partition{{Name: "a", Weight: wa}, {Name: "b", Weight: wb}},
		DefaultPartition: "a",
	}
}

func newScheduler(t testing.TB, cfg Config, capacity Capacity, clock Clock) (*Scheduler, *prometheus.Registry) {
	t.Helper()
	if clock == nil {
		clock = newFakeClock()
	}
	reg := prometheus.NewRegistry()
	s, err := NewScheduler(cfg, capacity, clock, reg)
	require.NoError(t, err)
	return s, reg
}

func (s *Scheduler) gauges(partition string) (depth, inflight float64) {
	return testutil.ToFloat64(s.metrics.queueDepth.WithLabelValues(partition)),
		testutil.ToFloat64(s.metrics.inflight.WithLabelValues(partition))
}

func (s *Scheduler) decisionCount(partition string, d decision) float64 {
	return testutil.ToFloat64(s.metrics.decisions.WithLabelValues(partition, decisionNames[d]))
}

// assertIdle checks that nothing is left behind: no queue, no credit, no
// in-flight request, in the counters and in the gauges.
func assertIdle(t *testing.T, s *Scheduler) {
	t.Helper()
	st := s.Snapshot()
	assert.Zero(t, st.Outstanding, "outstanding credits")
	s.mu.Lock()
	assert.Zero(t, s.waiting, "waiting")
	assert.Empty(t, s.pending, "undelivered results")
	s.mu.Unlock()
	for _, p := range st.Partitions {
		assert.Zero(t, p.Queued, "%s queued", p.Name)
		assert.Zero(t, p.Inflight, "%s in flight", p.Name)
		depth, inflight := s.gauges(p.Name)
		assert.Zero(t, depth, "%s queue depth gauge", p.Name)
		assert.Zero(t, inflight, "%s in-flight gauge", p.Name)
	}
}

// collector gathers Submit results in an event-loop test.
type collector struct {
	mu      sync.Mutex
	credits []*Credit
	errs    []error
}

func (c *collector) done(cr *Credit, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.errs = append(c.errs, err)
		return
	}
	c.credits = append(c.credits, cr)
}

func (c *collector) partitions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.credits))
	for i, cr := range c.credits {
		out[i] = cr.Partition()
	}
	return out
}
