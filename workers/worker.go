package workers

import (
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Spec is what the gateway is told about a worker, from config, the admin API
// or discovery.
type Spec struct {
	ID         string
	URL        string
	Models     []string // empty: learned from the worker's /v1/models
	Engine     Engine
	MaxRunning int // capacity hint used when telemetry reports none
	DPRanks    int
	// Origin says who registered the worker (OriginConfig, OriginAdmin,
	// OriginDiscovery), so that each source reconciles only its own.
	Origin string
	// APIKey, when set, is sent as "Authorization: Bearer APIKEY" on every
	// request to the worker (completions, health, models, telemetry).
	APIKey string
}

// The origins of a worker: each source of membership changes only the
// workers it registered.
const (
	OriginConfig    = "config"
	OriginAdmin     = "admin"
	OriginDiscovery = "discovery"
)

// Identity binds a decision to one incarnation of a worker.
type Identity struct {
	ID         string
	Generation uint64
	Revision   uint64
}

// descriptor is the part of a worker that changes rarely; it is replaced
// whole (copy on write) so readers on the request path never lock.
type descriptor struct {
	models     []string
	learned    bool // models came from the worker, not from the spec
	revision   uint64
	maxRunning int
}

// Worker is one registered engine endpoint and its live state.
type Worker struct {
	id         string
	base       *url.URL
	baseURL    string // without trailing slash, for joining request paths
	engine     Engine
	dpRanks    int
	origin     string
	apiKey     string
	auth       []string // the Authorization header value, nil without a key
	generation atomic.Uint64

	desc     atomic.Pointer[descriptor]
	healthy  atomic.Bool
	draining atomic.Bool
	removing atomic.Bool // draining, and leaves the registry once idle
	inflight atomic.Int64
	sample   atomic.Pointer[Sample]
	// lastComplete is the last sample with every rank, for restart detection.
	lastComplete atomic.Pointer[Sample]
	breaker      *Breaker

	// health check bookkeeping, touched only by the health loop
	okStreak, failStreak int
	everHealthy          bool
}

func newWorker(s Spec, generation uint64, breaker *Breaker) (*Worker, error) {
	u, err := url.Parse(s.URL)
	if err != nil {
		return nil, err
	}
	w := &Worker{
		id:      s.ID,
		base:    u,
		baseURL: strings.TrimRight(s.URL, "/"),
		engine:  s.Engine,
		dpRanks: max(s.DPRanks, 1),
		origin:  s.Origin,
		apiKey:  s.APIKey,
		breaker: breaker,
	}
	if s.APIKey != "" {
		w.auth = []string{"Bearer " + s.APIKey}
	}
	w.generation.Store(generation)
	w.desc.Store(&descriptor{models: slices.Clone(s.Models), maxRunning: s.MaxRunning, revision: 1})
	return w, nil
}

// ID is the worker's stable id.
func (w *Worker) ID() string { return w.id }

// URL is the worker's base URL as configured.
func (w *Worker) URL() string { return w.baseURL }

// Engine is the telemetry format the worker speaks.
func (w *Worker) Engine() Engine { return w.engine }

// DPRanks is how many data-parallel ranks the worker reports.
func (w *Worker) DPRanks() int { return w.dpRanks }

// Origin is who registered the worker (OriginConfig, OriginAdmin, OriginDiscovery).
func (w *Worker) Origin() string { return w.origin }

// Identity is the worker's current (id, generation, revision).
func (w *Worker) Identity() Identity {
	return Identity{ID: w.id, Generation: w.generation.Load(), Revision: w.desc.Load().revision}
}

// Models the worker serves (configured or learned). The slice must not be modified.
func (w *Worker) Models() []string { return w.desc.Load().models }

// Serves reports whether the worker serves model.
func (w *Worker) Serves(model string) bool { return slices.Contains(w.desc.Load().models, model) }

// MaxRunningHint is the configured capacity hint (0 when none).
func (w *Worker) MaxRunningHint() int { return w.desc.Load().maxRunning }

// Healthy reports the active health check's verdict.
func (w *Worker) Healthy() bool { return w.healthy.Load() }

// Draining reports whether the worker takes no new requests.
func (w *Worker) Draining() bool { return w.draining.Load() }

// Removing reports whether the worker is draining to leave the registry
// (Registry.Retire, or an old incarnation after Registry.Replace).
func (w *Worker) Removing() bool { return w.removing.Load() }

// Serving reports whether the worker is in service: healthy and not
// draining. Readiness and the model list follow it; a circuit breaker's
// short open periods do not.
func (w *Worker) Serving() bool { return w.healthy.Load() && !w.draining.Load() }

// Routable reports whether new requests may be sent to the worker now:
// serving, and its circuit breaker allows.
func (w *Worker) Routable(now time.Time) bool { return w.Serving() && w.breaker.Allows(now) }

// BeginAttempt asks the worker's circuit breaker to let one request
// through; false means pick another worker. The ticket goes to EndAttempt.
func (w *Worker) BeginAttempt(now time.Time) (Ticket, bool) { return w.breaker.Begin(now) }

// EndAttempt tells the circuit breaker how the request of t went, once.
func (w *Worker) EndAttempt(t Ticket, h Health, now time.Time) { w.breaker.End(t, h, now) }

// CircuitState is the circuit breaker's state at now.
func (w *Worker) CircuitState(now time.Time) BreakerState { return w.breaker.State(now) }

// Inflight is the number of requests this gateway has in flight on the worker.
func (w *Worker) Inflight() int { return int(w.inflight.Load()) }

// Sample returns the last telemetry sample and whether there is one.
func (w *Worker) Sample() (Sample, bool) {
	s := w.sample.Load()
	if s == nil {
		return Sample{}, false
	}
	return *s, true
}

// StoreSample records a telemetry poll. A failed poll keeps the old sample,
// which then ages into staleness: stale load is never mistaken for fresh.
func (w *Worker) StoreSample(s Sample, err error) {
	if err != nil {
		return
	}
	if prev := w.lastComplete.Load(); prev != nil && restarted(*prev, s) {
		w.generation.Add(1)
	}
	if s.Complete {
		w.lastComplete.Store(&s)
	}
	w.sample.Store(&s)
}

// restarted reports whether cumulative counters went backwards between two
// complete samples: the engine process restarted and its KV cache is gone.
// Counters are summed over ranks, so an incomplete sample (a rank missing
// from one scrape) would look like a drop; only complete samples compare.
func restarted(prev, next Sample) bool {
	if !prev.Complete || !next.Complete {
		return false
	}
	return next.PrefixCacheQueries < prev.PrefixCacheQueries || next.PrefixCacheHits < prev.PrefixCacheHits
}

// Acquire counts one request in flight on the worker and returns the function
// that releases it. The release is idempotent, so every exit path of a
// request may call it and the count is still released exactly once.
func (w *Worker) Acquire() (release func()) {
	w.inflight.Add(1)
	var done atomic.Bool
	return func() {
		if done.CompareAndSwap(false, true) {
			w.inflight.Add(-1)
		}
	}
}

// setModels records models learned from the worker; a change bumps the revision.
func (w *Worker) setModels(models []string) {
	for {
		old := w.desc.Load()
		if slices.Equal(old.models, models) {
			return
		}
		next := *old
		next.models = slices.Clone(models)
		next.learned = true
		next.revision++
		if w.desc.CompareAndSwap(old, &next) {
			return
		}
	}
}

// respec applies a changed models list and capacity hint in place, and
// bumps the revision if what the worker serves or its capacity changed.
// Empty models: learned from the worker again, the current list kept until
// its next health check lists them.
func (w *Worker) respec(models []string, maxRunning int) {
	for {
		old := w.desc.Load()
		next := *old
		next.maxRunning = maxRunning
		if len(models) == 0 {
			next.learned = true
		} else {
			next.models, next.learned = slices.Clone(models), false
		}
		if slices.Equal(next.models, old.models) && next.maxRunning == old.maxRunning {
			if next.learned == old.learned || w.desc.CompareAndSwap(old, &next) {
				return
			}
			continue
		}
		next.revision++
		if w.desc.CompareAndSwap(old, &next) {
			return
		}
	}
}

func (w *Worker) modelsLearned() bool {
	d := w.desc.Load()
	return d.learned || len(d.models) == 0
}
