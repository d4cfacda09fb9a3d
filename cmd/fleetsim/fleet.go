package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/sim"
)

// epoch is virtual time zero as the router's clock reads it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// fleetConfig is what every policy's fleet is built from.
type fleetConfig struct {
	Workers           int
	Engine            sim.Config
	TelemetryInterval time.Duration // how often the router's view of load is refreshed
	TelemetryMaxAge   time.Duration // routing.Options.MaxAge
	Seed              uint64
}

// requestState is what the run knows of one request.
type requestState struct {
	decision   *routing.Decision
	worker     int32
	firstToken time.Duration
}

// fleet is one policy's run: its router, its engines and the event loop
// that drives them in virtual time.
type fleet struct {
	cfg     fleetConfig
	wl      *Workload
	router  *routing.Router
	engines []*sim.Engine
	pool    *telemetryPool
	wake    wakeQueue
	now     time.Duration
	states  []requestState
	stats   *fleetStats
	req     routing.Request // reused for every arrival
	events  []sim.Event     // reused for every Advance
}

func newFleet(cfg fleetConfig, wl *Workload, policy routing.Policy) (*fleet, error) {
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("workers %d: must be at least 1", cfg.Workers)
	}
	if cfg.TelemetryInterval <= 0 {
		return nil, fmt.Errorf("telemetry interval %v: must be positive", cfg.TelemetryInterval)
	}
	if cfg.Engine.BlockTokens != wl.BlockTokens {
		return nil, fmt.Errorf("engine blocks of %d tokens, workload hashed in blocks of %d", cfg.Engine.BlockTokens, wl.BlockTokens)
	}
	f := &fleet{
		cfg:    cfg,
		wl:     wl,
		pool:   newTelemetryPool(cfg.Workers, cfg.Engine.MaxRunning),
		wake:   newWakeQueue(cfg.Workers),
		states: make([]requestState, len(wl.Requests)),
		stats:  newFleetStats(cfg.Workers, len(wl.Requests)),
		events: make([]sim.Event, 0, 256),
	}
	for range cfg.Workers {
		e, err := sim.New(cfg.Engine)
		if err != nil {
			return nil, err
		}
		f.engines = append(f.engines, e)
	}
	f.router = routing.NewRouter(policy, routing.Options{
		MaxAge: cfg.TelemetryMaxAge,
		Clock:  func() time.Time { return epoch.Add(f.now) },
		Rand:   policyRand(cfg.Seed, policy.Name()),
	})
	f.req.Model = wl.Model
	return f, nil
}

// policyRand gives each policy its own random stream from the run's seed.
func policyRand(seed uint64, policy string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(policy))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// run replays the workload to its end: every request finished or rejected.
// Events at one instant go engines first (a finishing request frees its
// slot), then the telemetry poll (which sees that), then arrivals (which
// see the poll).
func (f *fleet) run(ctx context.Context) error {
	reqs := f.wl.Requests
	next := 0
	var tick time.Duration
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		e, wakeAt, busy := f.wake.peek()
		if !busy && next == len(reqs) {
			break
		}
		arrival := time.Duration(1<<63 - 1)
		if next < len(reqs) {
			arrival = reqs[next].At
		}
		switch {
		case busy && wakeAt <= tick && wakeAt <= arrival:
			f.now = wakeAt
			f.advance(e)
		case tick <= arrival:
			f.now = tick
			f.poll()
			tick += f.cfg.TelemetryInterval
		default:
			f.now = arrival
			if err := f.arrive(next); err != nil {
				return err
			}
			next++
		}
	}
	f.stats.balance.advance(f.now)
	return nil
}

// advance brings engine e to now and takes in its events.
func (f *fleet) advance(e int) {
	eng := f.engines[e]
	f.events = eng.Advance(f.now, f.events[:0])
	for i := range f.events {
		f.handle(&f.events[i])
	}
	f.observe(e)
}

func (f *fleet) handle(ev *sim.Event) {
	st := &f.states[ev.ID]
	r := &f.wl.Requests[ev.ID]
	switch ev.Kind {
	case sim.EventFirstToken:
		st.firstToken = ev.At
		f.stats.cachedTokens += int64(ev.CachedTokens)
	case sim.EventFinished:
		f.stats.completed++
		f.stats.ttft = append(f.stats.ttft, st.firstToken-r.At)
		f.stats.e2e = append(f.stats.e2e, ev.At-r.At)
		f.stats.outputTokens += int64(ev.Tokens)
		f.stats.lastFinish = max(f.stats.lastFinish, ev.At)
		f.pool.finished(int(st.worker))
		st.decision.Done(routing.OutcomeSuccess)
		st.decision = nil
	}
}

// observe samples engine e after any change: its wake-up time, its waiting
// queue and its batch.
func (f *fleet) observe(e int) {
	eng := f.engines[e]
	at, ok := eng.NextEventTime()
	f.wake.set(e, at, ok)
	s := eng.Snapshot()
	f.stats.maxWaiting = max(f.stats.maxWaiting, s.Waiting)
	f.stats.balance.set(f.now, e, s.Running)
}

// poll is a telemetry tick: every worker reports its load as of now.
func (f *fleet) poll() {
	at := epoch.Add(f.now)
	for i, eng := range f.engines {
		f.events = eng.Advance(f.now, f.events[:0])
		for j := range f.events {
			f.handle(&f.events[j])
		}
		f.pool.sample(i, eng.Snapshot(), at)
		f.observe(i)
	}
}

// arrive routes request i and submits it to the chosen engine. A request
// the router refuses or the engine could never hold is rejected; any other
// failure is a bug in fleetsim or below, and ends the run.
func (f *fleet) arrive(i int) error {
	r := &f.wl.Requests[i]
	f.req.PromptTokens = r.PromptTokens
	f.req.MaxTokens = r.OutputTokens
	f.req.Prefix = r.Prefix
	d, err := f.router.Route(&f.req, f.pool)
	if err != nil {
		f.stats.rejected++
		return nil
	}
	f.stats.decisions[d.Label]++
	e, ok := f.pool.worker(d.Worker.ID)
	if !ok {
		d.Done(routing.OutcomeFailure)
		return fmt.Errorf("request %d: policy %s chose %q, which the pool never offered", i, f.router.Policy().Name(), d.Worker.ID)
	}
	err = f.engines[e].Submit(f.now, sim.Request{
		ID:           uint64(i),
		BlockHashes:  r.Prefix,
		PromptTokens: r.PromptTokens,
		OutputTokens: r.OutputTokens,
	})
	if err != nil {
		d.Done(routing.OutcomeFailure)
		if !errors.Is(err, sim.ErrTooLarge) {
			return fmt.Errorf("request %d: %w", i, err)
		}
		// The engine would answer 400: the context is too long.
		f.stats.rejected++
		return nil
	}
	f.states[i] = requestState{decision: d, worker: int32(e)}
	f.pool.dispatched(e)
	f.observe(e)
	return nil
}

// hitRate is the share of admitted prompt tokens the engines found cached,
// from their own counters.
func (f *fleet) hitRate() (hits, queries uint64) {
	for _, e := range f.engines {
		s := e.Snapshot()
		hits += s.PrefixCacheHits
		queries += s.PrefixCacheQueries
	}
	return hits, queries
}
