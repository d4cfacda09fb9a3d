package main

import (
	"fmt"
	"time"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/sim"
)

// telemetryPool is the fleet as the router sees it: each worker's load as of
// the last telemetry poll, plus the gateway's own live in-flight count. It
// is what makes the simulation honest about staleness: a burst between two
// polls sees the same running and waiting figures, as in production.
type telemetryPool struct {
	endpoints []routing.Endpoint
	index     map[string]int
}

var _ routing.Pool = (*telemetryPool)(nil)

func newTelemetryPool(workers, maxRunning int) *telemetryPool {
	p := &telemetryPool{endpoints: make([]routing.Endpoint, workers), index: make(map[string]int, workers)}
	for i := range p.endpoints {
		id := fmt.Sprintf("w%d", i)
		p.endpoints[i] = routing.Endpoint{ID: id, Generation: 1, Revision: 1, Load: routing.Load{KVUsage: -1, MaxRunning: maxRunning}}
		p.index[id] = i
	}
	return p
}

// Candidates implements routing.Pool: every worker serves every model and
// none ever fails.
func (p *telemetryPool) Candidates(_ string, dst []routing.Endpoint) []routing.Endpoint {
	return append(dst, p.endpoints...)
}

// worker is the index of the endpoint id.
func (p *telemetryPool) worker(id string) (int, bool) {
	i, ok := p.index[id]
	return i, ok
}

// sample records worker i's telemetry poll at time at.
func (p *telemetryPool) sample(i int, s sim.Snapshot, at time.Time) {
	l := &p.endpoints[i].Load
	l.Running = s.Running
	l.Waiting = s.Waiting
	l.KVUsage = s.KVUsage
	l.MaxRunning = s.MaxRunning
	l.SampledAt = at
	l.Complete = true
}

// dispatched and finished keep the live in-flight count.
func (p *telemetryPool) dispatched(i int) { p.endpoints[i].Load.Inflight++ }
func (p *telemetryPool) finished(i int)   { p.endpoints[i].Load.Inflight-- }
