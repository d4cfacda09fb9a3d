package main

import (
	"container/heap"
	"time"

	"github.com/kvgate/kvgate/admission"
)

// virtualClock is the admission scheduler's clock in the fleet's virtual
// time: Now reads the event loop's time, and an AfterFunc timer becomes an
// event of the loop, fired by it (not on a goroutine of its own) once the
// loop reaches the timer's time. Timers due at one instant fire in the order
// they were set, so runs stay deterministic.
type virtualClock struct {
	now    *time.Duration // the event loop's time
	timers timerHeap
	seq    uint64
}

var _ admission.Clock = (*virtualClock)(nil)

// Now implements admission.Clock.
func (c *virtualClock) Now() time.Time { return epoch.Add(*c.now) }

// AfterFunc implements admission.Clock.
func (c *virtualClock) AfterFunc(d time.Duration, f func()) admission.Timer {
	c.seq++
	t := &virtualTimer{clock: c, at: *c.now + max(d, 0), seq: c.seq, f: f}
	heap.Push(&c.timers, t)
	return t
}

// next is when the earliest pending timer is due; false when none is.
func (c *virtualClock) next() (time.Duration, bool) {
	if len(c.timers) == 0 {
		return 0, false
	}
	return c.timers[0].at, true
}

// fire runs the earliest pending timer.
func (c *virtualClock) fire() {
	t := heap.Pop(&c.timers).(*virtualTimer)
	t.f()
}

// virtualTimer is a pending AfterFunc call.
type virtualTimer struct {
	clock *virtualClock
	at    time.Duration
	seq   uint64
	f     func()
	index int // in the heap; -1 once fired or stopped
}

// Stop implements admission.Timer.
func (t *virtualTimer) Stop() bool {
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.clock.timers, t.index)
	return true
}

// timerHeap orders timers by due time, then by the order they were set.
type timerHeap []*virtualTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*virtualTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
