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

// Pool is the read-only view of the fleet that routing needs: the workers
// that may take a request for model now (healthy, not draining, circuit
// allowing), appended to dst.
type Pool interface {
	Candidates(model string, dst []Endpoint) []Endpoint
}
