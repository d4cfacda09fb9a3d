package main

import (
	"time"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/routing"
)

// fleetCapacity is the fleet's issuable headroom in request slots, computed
// as the gateway's handlers.FleetCapacity computes it, from what the router
// sees: each worker counts max_running minus the running and waiting of its
// last telemetry sample minus what the router dispatched to it since that
// sample (Router.ReservedSince), when the sample is complete and fresh;
// otherwise its configured max_running minus the gateway's own in-flight
// requests. A worker over its capacity counts 0, never less. Every
// simulated worker is healthy and routable, and its slots are known.
type fleetCapacity struct {
	pool   *telemetryPool
	router *routing.Router
	maxAge time.Duration
	now    func() time.Time
}

var _ admission.Capacity = (*fleetCapacity)(nil)

// Available implements admission.Capacity.
func (c *fleetCapacity) Available() int {
	now := c.now()
	total := 0
	for i := range c.pool.endpoints {
		total += max(0, c.headroom(&c.pool.endpoints[i], now))
	}
	return total
}

func (c *fleetCapacity) headroom(e *routing.Endpoint, now time.Time) int {
	if l := &e.Load; l.Fresh(now, c.maxAge) {
		return l.Headroom(true, c.router.ReservedSince(e.ID, l.SampledAt))
	}
	return e.Load.Headroom(false, 0)
}
