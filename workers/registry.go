package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Registry's background checks.
type Options struct {
	// Client reaches the workers for health, model and telemetry checks;
	// every call carries its own timeout.
	Client *http.Client

	HealthInterval     time.Duration
	HealthTimeout      time.Duration
	HealthPath         string
	UnhealthyThreshold int
	HealthyThreshold   int

	TelemetryInterval time.Duration
	TelemetryTimeout  time.Duration

	BreakerThreshold int
	BreakerOpenFor   time.Duration

	Now    func() time.Time
	Logger *slog.Logger
	// OnChange, when set, is called after a worker is added or removed, or
	// its routability or identity changes.
	OnChange func()
	// OnRemove, when set, is called with the id of each removed worker, so
	// that routing can drop what it knows of it.
	OnRemove func(id string)
	// OnSample, when set, is called after each telemetry poll is stored:
	// the fleet's free capacity may have changed.
	OnSample func()
	// Pending, when set, counts the requests routed to a worker that have
	// not finished (the router's outstanding reservations). A drain before
	// removal waits for it to reach zero as well as the in-flight count: a
	// request is routed before it is counted in flight.
	Pending func(id string) int
}

// ErrDuplicate is returned by Add for an id already registered.
var ErrDuplicate = errors.New("worker id already registered")

// ErrClosed is returned by Add (and Replace) once the registry is closed.
var ErrClosed = errors.New("registry closed")

type entry struct {
	w      *Worker
	cancel context.CancelFunc
	done   chan struct{}
	// drained: Drain was asked for (guarded by Registry.mu). Restore takes
	// back a retirement, never a drain.
	drained bool
}

// Registry holds the workers and runs their health and telemetry loops.
// Reads (Workers, Get) are lock-free snapshots, so the request path never
// waits on a writer.
type Registry struct {
	opts    Options
	Metrics *Metrics

	mu      sync.Mutex
	entries map[string]*entry
	lastGen map[string]uint64 // survives removal, so a re-added id gets a new generation
	closed  bool
	drains  drains // drains before removal (membership.go)

	snapshot atomic.Pointer[[]*Worker]
	ctx      context.Context
	stop     context.CancelFunc
}

// NewRegistry returns an empty registry; Close stops its loops.
func NewRegistry(opts Options) *Registry {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Client == nil {
		opts.Client = http.DefaultClient
	}
	ctx, stop := context.WithCancel(context.Background())
	r := &Registry{
		opts:    opts,
		Metrics: newMetrics(),
		entries: map[string]*entry{},
		lastGen: map[string]uint64{},
		ctx:     ctx,
		stop:    stop,
	}
	r.snapshot.Store(&[]*Worker{})
	return r
}

// Add registers a worker and starts its health and telemetry loops. The
// worker is not routable until its first health check passes.
func (r *Registry) Add(s Spec) (*Worker, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	if _, dup := r.entries[s.ID]; dup {
		return nil, fmt.Errorf("%w: %q", ErrDuplicate, s.ID)
	}
	gen := r.lastGen[s.ID] + 1
	r.lastGen[s.ID] = gen
	w, err := newWorker(s, gen, NewBreaker(r.opts.BreakerThreshold, r.opts.BreakerOpenFor))
	if err != nil {
		return nil, fmt.Errorf("worker %q: %w", s.ID, err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	e := &entry{w: w, cancel: cancel, done: make(chan struct{})}
	r.entries[s.ID] = e
	r.publishLocked()
	go r.run(ctx, e)
	r.opts.Logger.Info("worker added", "worker", s.ID, "url", s.URL, "generation", gen, "origin", s.Origin)
	return w, nil
}

// Remove stops the worker's loops and drops it from the registry at once.
// Requests already in flight keep their *Worker and finish normally.
func (r *Registry) Remove(id string) bool { return r.remove(id, nil) }

// remove drops id's entry; with want set, only if it is still that entry
// and still retiring.
func (r *Registry) remove(id string, want *entry) bool {
	r.mu.Lock()
	e, ok := r.entries[id]
	if ok && want != nil && (e != want || !e.w.removing.Load()) {
		ok = false // replaced, or its retirement taken back (Restore)
	}
	if ok {
		delete(r.entries, id)
		r.publishLocked()
	}
	r.mu.Unlock()
	if !ok {
		return false
	}
	e.cancel()
	<-e.done
	r.Metrics.forget(id)
	if r.opts.OnRemove != nil {
		r.opts.OnRemove(id)
	}
	r.opts.Logger.Info("worker removed", "worker", id)
	r.changed()
	return true
}

// Get returns the worker with id, or nil.
func (r *Registry) Get(id string) *Worker {
	for _, w := range *r.snapshot.Load() {
		if w.id == id {
			return w
		}
	}
	return nil
}

// Workers returns the registered workers sorted by id. The slice is shared
// and must not be modified.
func (r *Registry) Workers() []*Worker { return *r.snapshot.Load() }

// Models returns the sorted union of the models that serving workers serve.
func (r *Registry) Models() []string {
	var models []string
	for _, w := range r.Workers() {
		if w.Serving() {
			for _, m := range w.Models() {
				if !slices.Contains(models, m) {
					models = append(models, m)
				}
			}
		}
	}
	slices.Sort(models)
	return models
}

// ModelKnowledge is what the registry knows of a model name.
type ModelKnowledge int

const (
	// ModelUnknown: no worker serves it, and every worker's models are known.
	ModelUnknown ModelKnowledge = iota
	// ModelServed: some registered worker, serving or not, serves it.
	ModelServed
	// ModelPending: no known worker serves it, but some worker has not yet
	// told us its models (it has never answered /v1/models): it may.
	ModelPending
)

// KnowsModel says whether model is served, unknown, or not yet knowable.
// Clients treat 404 as permanent, so a model is only unknown once every
// worker's models are known.
func (r *Registry) KnowsModel(model string) ModelKnowledge {
	pending := false
	for _, w := range r.Workers() {
		if w.Serves(model) {
			return ModelServed
		}
		if len(w.Models()) == 0 {
			pending = true
		}
	}
	if pending {
		return ModelPending
	}
	return ModelUnknown
}

// AnyServing reports whether at least one worker is in service.
func (r *Registry) AnyServing() bool {
	for _, w := range r.Workers() {
		if w.Serving() {
			return true
		}
	}
	return false
}

// Close stops every loop and waits for them.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	entries := make([]*entry, 0, len(r.entries))
	for _, e := range r.entries {
		entries = append(entries, e)
	}
	r.mu.Unlock()
	r.stop()
	for _, e := range entries {
		<-e.done
	}
	r.drains.wg.Wait()
}

func (r *Registry) publishLocked() {
	ws := make([]*Worker, 0, len(r.entries))
	for _, e := range r.entries {
		ws = append(ws, e.w)
	}
	slices.SortFunc(ws, func(a, b *Worker) int { return strings.Compare(a.id, b.id) })
	r.snapshot.Store(&ws)
}

func (r *Registry) changed() {
	if r.opts.OnChange != nil {
		r.opts.OnChange()
	}
}

// run owns one worker's background work: the health loop here, the
// telemetry poller beside it.
func (r *Registry) run(ctx context.Context, e *entry) {
	defer close(e.done)
	var wg sync.WaitGroup
	if r.opts.TelemetryInterval > 0 {
		f := NewTelemetryFetcher(r.opts.Client, e.w.baseURL, e.w.engine, e.w.dpRanks)
		f.SetAPIKey(e.w.apiKey)
		publish := e.w.StoreSample
		if r.opts.OnSample != nil {
			publish = func(s Sample, err error) {
				e.w.StoreSample(s, err)
				r.opts.OnSample()
			}
		}
		wg.Go(func() {
			RunTelemetryPoller(ctx, f, r.opts.TelemetryInterval, r.opts.TelemetryTimeout, r.opts.Now, publish)
		})
	}
	r.healthLoop(ctx, e.w)
	wg.Wait()
}

func (r *Registry) healthLoop(ctx context.Context, w *Worker) {
	interval := r.opts.HealthInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	for {
		r.checkHealth(ctx, w)
		// Jitter spreads the checks of a large fleet over the interval.
		wait := interval/2 + rand.N(interval/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
