package sim

import (
	"fmt"
	"time"
)

// Engine is one simulated engine worker. It is not safe for concurrent use:
// the caller serialises calls (enginesim holds a mutex, fleetsim runs one
// event loop).
//
// Time is a time.Duration since an epoch the caller chooses. Calls must not go
// back in time: a time earlier than one already passed is taken as the latest
// one, so a real-time driver that reads its clock before taking its lock
// cannot corrupt the model.
type Engine struct {
	cfg            Config
	capacityBlocks int

	clock    time.Duration // every step ending at or before clock is done
	stepping bool          // a step is in progress and ends at stepEnd
	stepEnd  time.Duration

	running []*request // admission order
	waiting fifo
	byID    map[uint64]*request

	cache blockCache
	// private counts blocks held by running requests outside the cache
	// (unscheduled prompt blocks, partial tails, output).
	private int
	// kvVersion changes whenever blocks are released or converted, so a
	// blocked queue head is retried only when its answer could change.
	kvVersion    uint64
	headBlockedV uint64
	headBlocked  bool

	hitTokens, queryTokens uint64
	waitingPromptTokens    int

	// pending holds events produced while Submit or Cancel caught the clock
	// up; the next Advance returns them first.
	pending []Event
	spare   []*request
}

// New returns an idle engine with an empty cache.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Engine{
		cfg:            cfg,
		capacityBlocks: cfg.CapacityBlocks(),
		running:        make([]*request, 0, cfg.MaxRunning),
		byID:           make(map[uint64]*request),
		cache:          newBlockCache(cfg.CapacityBlocks()),
	}, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Now is the latest time the engine has been brought to.
func (e *Engine) Now() time.Duration { return e.clock }

// Submit puts a request at the tail of the waiting queue at time now. An idle
// engine starts a step at once, so the request may be admitted at now.
func (e *Engine) Submit(now time.Duration, req Request) error {
	if req.PromptTokens < 1 || req.OutputTokens < 1 {
		return fmt.Errorf("%w: request %d: prompt %d and output %d tokens must both be at least 1",
			ErrInvalidRequest, req.ID, req.PromptTokens, req.OutputTokens)
	}
	if _, dup := e.byID[req.ID]; dup {
		return fmt.Errorf("%w: %d", ErrDuplicateID, req.ID)
	}
	if need := blocksFor(req.PromptTokens+req.OutputTokens, e.cfg.BlockTokens); need > e.capacityBlocks {
		return fmt.Errorf("%w: request %d needs %d blocks, the cache holds %d",
			ErrTooLarge, req.ID, need, e.capacityBlocks)
	}
	e.pending = e.run(now, e.pending)

	r := e.newRecord(req)
	e.byID[r.ID] = r
	e.waiting.push(r)
	e.waitingPromptTokens += r.PromptTokens
	if !e.stepping {
		e.startStep(e.clock)
	}
	return nil
}

// Cancel removes a request wherever it is: waiting, prefilling or decoding.
// Its pinned blocks are released; the prompt blocks it already scheduled stay
// cached. It reports whether the engine held the request. A cancelled
// request emits no further event.
func (e *Engine) Cancel(now time.Duration, id uint64) bool {
	e.pending = e.run(now, e.pending)
	r, ok := e.byID[id]
	if !ok {
		return false
	}
	if r.phase == PhaseWaiting {
		e.waiting.remove(r)
		e.waitingPromptTokens -= r.PromptTokens
		// The queue may have a new head, which deserves its own try.
		e.headBlocked = false
	} else {
		e.removeRunning(r)
		e.release(r)
	}
	delete(e.byID, id)
	e.recycle(r)
	return true
}

// Advance brings the engine to time now, appends to dst every event due up to
// now in time order, and returns dst. Reusing dst across calls makes the
// steady state allocation free.
func (e *Engine) Advance(now time.Duration, dst []Event) []Event {
	if len(e.pending) > 0 {
		dst = append(dst, e.pending...)
		e.pending = e.pending[:0]
	}
	return e.run(now, dst)
}

// NextEventTime is when the engine next changes state (the end of the step in
// progress), so a driver knows when to call Advance. A step without visible
// events (decode steps of requests without TokenEvents) still counts. false
// when the engine is idle. Events held back from Submit or Cancel make it
// return the current time.
func (e *Engine) NextEventTime() (time.Duration, bool) {
	if len(e.pending) > 0 {
		return e.clock, true
	}
	return e.stepEnd, e.stepping
}

// Idle reports whether the engine holds no request and has no event pending.
func (e *Engine) Idle() bool {
	return !e.stepping && len(e.pending) == 0 && len(e.byID) == 0
}

// run completes every step that ends by now, appending their events.
func (e *Engine) run(now time.Duration, dst []Event) []Event {
	for e.stepping && e.stepEnd <= now {
		end := e.stepEnd
		e.clock = end
		dst = e.finishStep(end, dst)
		e.startStep(end)
	}
	if now > e.clock {
		e.clock = now
	}
	return dst
}

func (e *Engine) newRecord(req Request) *request {
	var r *request
	if n := len(e.spare); n > 0 {
		r = e.spare[n-1]
		e.spare = e.spare[:n-1]
	} else {
		r = &request{}
	}
	slots := r.slots[:0]
	*r = request{Request: req, phase: PhaseWaiting, slots: slots}
	return r
}

func (e *Engine) recycle(r *request) {
	r.BlockHashes = nil // do not keep the caller's slice alive
	e.spare = append(e.spare, r)
}

func (e *Engine) removeRunning(r *request) {
	for i, x := range e.running {
		if x == r {
			copy(e.running[i:], e.running[i+1:])
			e.running[len(e.running)-1] = nil
			e.running = e.running[:len(e.running)-1]
			return
		}
	}
}

// fifo is the waiting queue: a slice consumed from head, compacted when the
// consumed part dominates.
type fifo struct {
	items []*request
	head  int
}

func (q *fifo) len() int { return len(q.items) - q.head }

func (q *fifo) push(r *request) { q.items = append(q.items, r) }

func (q *fifo) front() *request { return q.items[q.head] }

func (q *fifo) pop() {
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head >= 64 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

func (q *fifo) remove(r *request) {
	for i := q.head; i < len(q.items); i++ {
		if q.items[i] == r {
			copy(q.items[i:], q.items[i+1:])
			q.items[len(q.items)-1] = nil
			q.items = q.items[:len(q.items)-1]
			return
		}
	}
}
