package handlers

import (
	"time"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/workers"
)

// registryPool is routing's read-only view of the registry: the routable
// workers serving a model, with their telemetry and in-flight counts.
type registryPool struct {
	reg *workers.Registry
	now func() time.Time
}

var _ routing.Pool = registryPool{}

func (p registryPool) Candidates(model string, dst []routing.Endpoint) []routing.Endpoint {
	now := p.now()
	for _, w := range p.reg.Workers() {
		if !w.Serves(model) || !w.Routable(now) {
			continue
		}
		id := w.Identity()
		load := routing.Load{KVUsage: -1, MaxRunning: w.MaxRunningHint(), Inflight: w.Inflight()}
		if s, ok := w.Sample(); ok {
			load.Running, load.Waiting, load.KVUsage = s.Running, s.Waiting, s.KVUsage
			load.SampledAt, load.Complete = s.At, s.Complete
			if s.MaxRunning > 0 {
				load.MaxRunning = s.MaxRunning
			}
		}
		dst = append(dst, routing.Endpoint{ID: id.ID, Generation: id.Generation, Revision: id.Revision, Load: load})
	}
	return dst
}
