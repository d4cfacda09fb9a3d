package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/kvgate/kvgate/admission"
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
	Admission         admissionConfig
	// Replicas is how many gateway replicas route the workload (0 or 1: one),
	// each with its own policy, index and reservations, behind a balancer
	// that sends each request to one of them at random. They see the same
	// telemetry and each its own in-flight requests.
	Replicas int
}

// requestState is what the run knows of one request.
type requestState struct {
	decision   *routing.Decision
	credit     *admission.Credit
	worker     int32
	replica    int32 // the gateway replica that routed it
	partition  int32 // index in the workload's partitions
	queued     bool  // waited in admission's queue for its credit
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
	adm     admitter
	// more are the gateway replicas beyond the first (router, pool).
	more []replica
}

// replica is one gateway replica's routing: its router and its view of the
// fleet.
type replica struct {
	router *routing.Router
	pool   *telemetryPool
}

// newFleet builds the fleet of one policy's run; more are the policy's
// instances for the replicas beyond the first (cfg.Replicas - 1 of them).
func newFleet(cfg fleetConfig, wl *Workload, policy routing.Policy, more ...routing.Policy) (*fleet, error) {
	if cfg.Workers < 1 {
		return nil, fmt.Errorf("workers %d: must be at least 1", cfg.Workers)
	}
	if n := max(cfg.Replicas, 1); len(more) != n-1 {
		return nil, fmt.Errorf("%d replicas need %d more policy instances, got %d", n, n-1, len(more))
	}
	if len(more) > 0 && cfg.Admission.Mode != admission.ModeOff {
		return nil, fmt.Errorf("replicas %d: admission runs in one gateway here; use --admission off", cfg.Replicas)
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
		stats:  newFleetStats(cfg.Workers, len(wl.Requests), max(len(wl.Partitions), 1)),
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
	for i, p := range more {
		f.more = append(f.more, replica{
			router: routing.NewRouter(p, routing.Options{
				MaxAge: cfg.TelemetryMaxAge,
				Clock:  func() time.Time { return epoch.Add(f.now) },
				Rand:   policyRand(cfg.Seed, fmt.Sprintf("%s#%d", p.Name(), i+1)),
			}),
			pool: newTelemetryPool(cfg.Workers, cfg.Engine.MaxRunning),
		})
	}
	f.req.Model = wl.Model
	f.req.SingleTarget = true // one completion each, never streamed
	if err := f.adm.init(f); err != nil {
		return nil, err
	}
	return f, nil
}

// replica is replica i's routing (0: the first, f.router and f.pool).
func (f *fleet) replica(i int32) replica {
	if i == 0 {
		return replica{router: f.router, pool: f.pool}
	}
	return f.more[i-1]
}

// replicaOf is the replica the balancer sends request i to: uniform, and a
// function of the seed and the request alone, so every policy's run sends
// each request to the same replica.
func (f *fleet) replicaOf(i int) int32 {
	n := uint64(len(f.more) + 1)
	if n == 1 {
		return 0
	}
	x := f.cfg.Seed ^ (uint64(i)+1)*0x9e3779b97f4a7c15 // splitmix64
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return int32((x ^ x>>31) % n)
}

// policyRand gives each policy its own random stream from the run's seed.
func policyRand(seed uint64, policy string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(policy))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// run replays the workload to its end: every request finished or rejected.
// Events at one instant go engines first (a finishing request frees its
// slot), then admission's timers (queue timeouts), then the telemetry poll
// (which sees both), then arrivals (which see the poll).
func (f *fleet) run(ctx context.Context) error {
	reqs := f.wl.Requests
	next := 0
	var tick time.Duration
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		e, wakeAt, busy := f.wake.peek()
		if !busy && next == len(reqs) && f.adm.queued == 0 {
			break
		}
		arrival := time.Duration(1<<63 - 1)
		if next < len(reqs) {
			arrival = reqs[next].At
		}
		timerAt, timer := f.adm.clock.next()
		switch {
		case busy && wakeAt <= tick && wakeAt <= arrival && (!timer || wakeAt <= timerAt):
			f.now = wakeAt
			if err := f.advance(e); err != nil {
				return err
			}
		case timer && timerAt <= tick && timerAt <= arrival:
			f.now = timerAt
			f.adm.clock.fire()
			if err := f.adm.flush(); err != nil {
				return err
			}
		case tick <= arrival:
			f.now = tick
			if err := f.poll(); err != nil {
				return err
			}
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
func (f *fleet) advance(e int) error {
	eng := f.engines[e]
	f.events = eng.Advance(f.now, f.events[:0])
	for i := range f.events {
		f.handle(&f.events[i])
	}
	f.observe(e)
	return f.adm.flush() // finished requests freed slots
}

func (f *fleet) handle(ev *sim.Event) {
	st := &f.states[ev.ID]
	r := &f.wl.Requests[ev.ID]
	switch ev.Kind {
	case sim.EventFirstToken:
		st.firstToken = ev.At
		f.stats.cachedTokens += int64(ev.CachedTokens)
	case sim.EventFinished:
		ttft := st.firstToken - r.At
		f.stats.completed++
		f.stats.ttft = append(f.stats.ttft, ttft)
		f.stats.e2e = append(f.stats.e2e, ev.At-r.At)
		f.stats.outputTokens += int64(ev.Tokens)
		f.stats.lastFinish = max(f.stats.lastFinish, ev.At)
		served := r.PromptTokens + ev.Tokens
		f.stats.partitions[st.partition].completed(ttft, served)
		f.replica(st.replica).pool.finished(int(st.worker))
		// Routing's reservation first, then the credit: the slot the request
		// frees is visible to the dispatch the release runs.
		st.decision.Done(routing.OutcomeSuccess)
		st.credit.Release(admission.OutcomeSuccess, served)
		st.decision, st.credit = nil, nil
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

// poll is a telemetry tick: every worker reports its load as of now, and
// admission dispatches into whatever headroom the new samples show.
func (f *fleet) poll() error {
	at := epoch.Add(f.now)
	for i, eng := range f.engines {
		f.events = eng.Advance(f.now, f.events[:0])
		for j := range f.events {
			f.handle(&f.events[j])
		}
		s := eng.Snapshot()
		f.pool.sample(i, s, at)
		for _, r := range f.more {
			r.pool.sample(i, s, at)
		}
		f.observe(i)
	}
	f.adm.sched.Kick()
	return f.adm.flush()
}

// arrive hands request i to admission, which dispatches it now or queues it.
func (f *fleet) arrive(i int) error {
	f.adm.submit(i)
	return f.adm.flush()
}

// dispatch routes admitted request i and submits it to the chosen engine. A
// request the router refuses or the engine could never hold is rejected; any
// other failure is a bug in fleetsim or below, and ends the run.
func (f *fleet) dispatch(i int, credit *admission.Credit) error {
	r := &f.wl.Requests[i]
	f.req.PromptTokens = r.PromptTokens
	f.req.MaxTokens = r.OutputTokens
	f.req.Prefix = r.Prefix
	f.req.Partition = r.Partition
	f.req.Proof = nil
	if f.adm.seeding {
		// The proof a seed must claim; redeeming it changes nothing else.
		if proof, err := credit.Redeem(f.adm.ids[i], f.wl.Model, r.Partition); err == nil {
			f.req.Proof = proof
		}
	}
	ri := f.replicaOf(i)
	rep := f.replica(ri)
	d, err := rep.router.Route(&f.req, rep.pool)
	if err != nil {
		credit.Release(admission.OutcomeFailure, 0)
		f.reject(i)
		return nil
	}
	// Routing's reservation now counts the request: admission stops
	// counting its credit.
	credit.Routed()
	f.stats.decisions[d.Label]++
	e, ok := rep.pool.worker(d.Worker.ID)
	if !ok {
		d.Done(routing.OutcomeFailure)
		credit.Release(admission.OutcomeFailure, 0)
		return fmt.Errorf("request %d: policy %s chose %q, which the pool never offered", i, rep.router.Policy().Name(), d.Worker.ID)
	}
	err = f.engines[e].Submit(f.now, sim.Request{
		ID:           uint64(i),
		BlockHashes:  r.Prefix,
		PromptTokens: r.PromptTokens,
		OutputTokens: r.OutputTokens,
	})
	if err != nil {
		d.Done(routing.OutcomeFailure)
		credit.Release(admission.OutcomeFailure, 0)
		if !errors.Is(err, sim.ErrTooLarge) {
			return fmt.Errorf("request %d: %w", i, err)
		}
		// The engine would answer 400: the context is too long.
		f.reject(i)
		return nil
	}
	st := &f.states[i]
	st.decision, st.credit, st.worker, st.replica = d, credit, int32(e), ri
	rep.pool.dispatched(e)
	f.observe(e)
	return nil
}

// reject counts request i as refused, in its partition too.
func (f *fleet) reject(i int) {
	f.stats.rejected++
	f.stats.partitions[f.states[i].partition].rejected++
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
