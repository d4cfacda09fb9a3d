package simserver

import (
	"sync/atomic"
	"time"

	"github.com/kvgate/kvgate/sim"
)

// The driver runs the engine on the wall clock. Simulated time is
// (wall time since the server started) / TimeScale; one goroutine sleeps until
// the engine's next step ends, advances it, and hands each event to the
// request waiting for it. With TimeScale 0 there is no driver: every submit
// runs the engine to idle at once, in virtual time, under the lock.

// ticket is one request's view of its progress, written by whoever advances
// the engine and read lock-free by its handler.
type ticket struct {
	id     uint64
	notify chan struct{} // capacity 1: progress since the handler last looked
	// generated is written after cached and before done, so a reader that
	// sees a token also sees its cached count, and one that sees done sees
	// every token.
	generated atomic.Int64
	cached    atomic.Int64
	done      atomic.Bool
}

func (t *ticket) signal() {
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

// instant reports whether the server answers at once (TimeScale 0).
func (s *Server) instant() bool { return s.cfg.TimeScale == 0 }

// simNowLocked is the engine time matching the wall clock now.
func (s *Server) simNowLocked() time.Duration {
	if s.instant() {
		return s.engine.Now()
	}
	return time.Duration(float64(time.Since(s.start)) / s.cfg.TimeScale)
}

// wallUntil is how long until the wall clock reaches engine time t.
func (s *Server) wallUntil(t time.Duration) time.Duration {
	return max(0, time.Duration(float64(t)*s.cfg.TimeScale)-time.Since(s.start))
}

// submit hands a request to the engine and returns its ticket.
func (s *Server) submit(req sim.Request) (*ticket, error) {
	t := &ticket{notify: make(chan struct{}, 1)}
	s.mu.Lock()
	s.nextID++
	req.ID, t.id = s.nextID, s.nextID
	if err := s.engine.Submit(s.simNowLocked(), req); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.tickets[t.id] = t
	if s.instant() {
		s.runToIdleLocked()
	}
	s.mu.Unlock()
	s.submitted.Add(1)
	s.wakeDriver()
	return t, nil
}

// withdraw takes a request out of the engine if it is still there, and
// forgets its ticket. It reports whether the engine still held it.
func (s *Server) withdraw(t *ticket) bool {
	s.mu.Lock()
	held := s.engine.Cancel(s.simNowLocked(), t.id)
	delete(s.tickets, t.id)
	s.mu.Unlock()
	s.wakeDriver()
	return held
}

// advanceLocked brings the engine to now and delivers the events.
func (s *Server) advanceLocked(now time.Duration) {
	s.events = s.engine.Advance(now, s.events[:0])
	for _, ev := range s.events {
		t := s.tickets[ev.ID]
		if t == nil {
			continue
		}
		switch ev.Kind {
		case sim.EventFirstToken, sim.EventToken:
			t.cached.Store(int64(ev.CachedTokens))
			t.generated.Store(int64(ev.Tokens))
		case sim.EventFinished:
			t.cached.Store(int64(ev.CachedTokens))
			t.generated.Store(int64(ev.Tokens))
			t.done.Store(true)
			delete(s.tickets, ev.ID)
		}
		t.signal()
	}
}

// runToIdleLocked runs the engine until it holds nothing: the TimeScale 0
// path, where steps take no wall time.
func (s *Server) runToIdleLocked() {
	for {
		next, ok := s.engine.NextEventTime()
		if !ok {
			return
		}
		s.advanceLocked(next)
	}
}

func (s *Server) wakeDriver() {
	if s.instant() {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// drive is the real-time loop: sleep until the next step ends or a request
// arrives or leaves, then advance.
func (s *Server) drive() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var due time.Duration // the step end the timer is set for
	for {
		s.mu.Lock()
		s.advanceLocked(s.simNowLocked())
		next, ok := s.engine.NextEventTime()
		s.mu.Unlock()

		var fired <-chan time.Time
		if ok {
			due = next
			timer.Reset(s.wallUntil(next))
			fired = timer.C
		}
		select {
		case <-fired:
			// Float rounding may put the clock a hair before the step
			// end the timer was set for; the timer firing proves it is due.
			s.mu.Lock()
			s.advanceLocked(max(due, s.simNowLocked()))
			s.mu.Unlock()
		case <-s.wake:
		case <-s.done:
			return
		}
	}
}
