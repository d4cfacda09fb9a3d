package handlers

import (
	"time"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// FleetCapacity is the fleet's issuable headroom in request slots, the
// admission scheduler's view of how many more requests may start now. A
// worker counts max_running minus what it runs and queues and what this
// gateway routed to it since its sample, from complete, fresh telemetry;
// without such telemetry, its configured max_running minus this gateway's
// own in-flight requests (routed ones included: a request counts from its
// decision, not from when the proxy sends it); with no known capacity at all,
// nothing: unknown is never headroom. Only serving workers whose circuit
// allows count, and a half-open one for its single trial request.
type FleetCapacity struct {
	Registry *workers.Registry
	Router   *routing.Router
	MaxAge   time.Duration
	Now      func() time.Time
}

var _ admission.Capacity = (*FleetCapacity)(nil)

// Available implements admission.Capacity.
func (c *FleetCapacity) Available() int {
	now := c.Now()
	total := 0
	for _, w := range c.Registry.Workers() {
		if !w.Routable(now) {
			continue
		}
		h := max(0, c.headroom(w, now))
		if w.CircuitState(now) == workers.BreakerHalfOpen {
			h = min(h, 1) // the breaker lets one trial through
		}
		total += h
	}
	return total
}

func (c *FleetCapacity) headroom(w *workers.Worker, now time.Time) int {
	l := workerLoad(w)
	if l.Fresh(now, c.MaxAge) {
		return l.Headroom(true, c.Router.ReservedSince(w.ID(), l.SampledAt))
	}
	// Routed requests count before the proxy acquires the worker (and during
	// a retry's backoff): else admitting one frees its own slot for the next.
	reserved, _ := c.Router.Reserved(w.ID())
	l.Inflight = max(l.Inflight, reserved)
	return l.Headroom(false, 0)
}
