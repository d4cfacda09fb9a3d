package main

import "time"

// wakeQueue is the engines' next wake-up times (sim.Engine.NextEventTime) in
// a binary min-heap indexed by engine, so that rescheduling one engine costs
// O(log workers) and idle engines cost nothing. Equal times wake the lower
// engine index first, which keeps runs deterministic.
type wakeQueue struct {
	at   []time.Duration // by engine
	heap []int32         // engine indices
	pos  []int32         // by engine: its place in heap, -1 when idle
}

func newWakeQueue(engines int) wakeQueue {
	q := wakeQueue{at: make([]time.Duration, engines), heap: make([]int32, 0, engines), pos: make([]int32, engines)}
	for i := range q.pos {
		q.pos[i] = -1
	}
	return q
}

// peek returns the engine that wakes first and when; false when all are idle.
func (q *wakeQueue) peek() (engine int, at time.Duration, ok bool) {
	if len(q.heap) == 0 {
		return 0, 0, false
	}
	e := q.heap[0]
	return int(e), q.at[e], true
}

// set schedules engine e to wake at at, or removes it when ok is false.
func (q *wakeQueue) set(e int, at time.Duration, ok bool) {
	p := q.pos[e]
	switch {
	case !ok && p < 0:
	case !ok:
		last := int32(len(q.heap) - 1)
		q.swap(p, last)
		q.heap = q.heap[:last]
		q.pos[e] = -1
		if p < last {
			q.fix(p)
		}
	case p < 0:
		q.at[e] = at
		q.heap = append(q.heap, int32(e))
		q.pos[e] = int32(len(q.heap) - 1)
		q.up(q.pos[e])
	default:
		q.at[e] = at
		q.fix(p)
	}
}

func (q *wakeQueue) less(i, j int32) bool {
	a, b := q.heap[i], q.heap[j]
	if q.at[a] != q.at[b] {
		return q.at[a] < q.at[b]
	}
	return a < b
}

func (q *wakeQueue) swap(i, j int32) {
	q.heap[i], q.heap[j] = q.heap[j], q.heap[i]
	q.pos[q.heap[i]] = i
	q.pos[q.heap[j]] = j
}

func (q *wakeQueue) fix(i int32) {
	if !q.down(i) {
		q.up(i)
	}
}

func (q *wakeQueue) up(i int32) {
	for i > 0 {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			return
		}
		q.swap(i, parent)
		i = parent
	}
}

// down sifts i toward the leaves and reports whether it moved.
func (q *wakeQueue) down(i int32) bool {
	start := i
	n := int32(len(q.heap))
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && q.less(r, l) {
			c = r
		}
		if !q.less(c, i) {
			break
		}
		q.swap(i, c)
		i = c
	}
	return i > start
}
