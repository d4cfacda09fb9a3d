package routing

import "time"

// Endpoint is one routable worker as routing sees it: identity and load.
type Endpoint struct {
	ID         string
	Generation uint64
	Revision   uint64
	Load       Load
}

// Load is a worker's last telemetry sample plus the gateway's own count.
type Load struct {
	Running    int
	Waiting    int
	KVUsage    float64   // 0..1; negative when not reported
	MaxRunning int       // batch capacity from telemetry or the config hint; 0 unknown
	SampledAt  time.Time // zero when the worker never reported
	Complete   bool      // every data-parallel rank reported
	Inflight   int       // requests this gateway has in flight on the worker
}

// Fresh reports whether the sample is complete and no older than maxAge at now.
func (l Load) Fresh(now time.Time, maxAge time.Duration) bool {
	return l.Complete && !l.SampledAt.IsZero() && now.Sub(l.SampledAt) <= maxAge
}

// Headroom is the free request slots of a worker with this load: with a
// fresh sample, max_running less what it runs and queues and reserved (the
// requests routed to it since the sample); without one, max_running less
// this gateway's own in-flight requests. Unknown capacity (max_running 0)
// is no headroom. Below zero when the worker is over its capacity. The
// gateway's admission capacity, the fleet simulator's and seeding's clean
// peers all count slots this one way.
func (l Load) Headroom(fresh bool, reserved int) int {
	switch {
	case l.MaxRunning <= 0:
		return 0
	case fresh:
		return l.MaxRunning - l.Running - l.Waiting - reserved
	}
	return l.MaxRunning - l.Inflight
}

// Pool is the read-only view of the fleet that routing needs: the workers
// that may take a request for model now (healthy, not draining, circuit
// allowing), appended to dst.
type Pool interface {
	Candidates(model string, dst []Endpoint) []Endpoint
}
