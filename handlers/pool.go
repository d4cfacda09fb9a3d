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
		dst = append(dst, routing.Endpoint{ID: id.ID, Generation: id.Generation, Revision: id.Revision, Load: workerLoad(w)})
	}
	return dst
}

// workerLoad is a worker's load as routing sees it: its last
// telemetry sample, the configured max_running when telemetry reports none,
// and this gateway's in-flight count.
func workerLoad(w *workers.Worker) routing.Load {
	load := routing.Load{KVUsage: -1, MaxRunning: w.MaxRunningHint(), Inflight: w.Inflight()}
	if s, ok := w.Sample(); ok {
		load.Running, load.Waiting, load.KVUsage = s.Running, s.Waiting, s.KVUsage
		load.SampledAt, load.Complete = s.At, s.Complete
		if s.MaxRunning > 0 {
			load.MaxRunning = s.MaxRunning
		}
	}
	return load
}
