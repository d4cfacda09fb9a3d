package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/routing"
)

// admissionConfig is the fair-share gate in front of the router, as the
// gateway's admission.* keys configure it.
type admissionConfig struct {
	Mode         admission.Mode
	MaxQueue     int           // admission.queue.max_per_partition; 0: unbounded
	QueueTimeout time.Duration // admission.queue.timeout; 0: none
}

// admitter runs the real admission.Scheduler inside the fleet's event loop.
// Every request goes through it, whatever the mode: off and shadow dispatch
// at once, enforce queues while the fleet's issuable headroom is spent. The
// scheduler's callbacks only record what it delivered; flush then acts on
// the deliveries in order, so the scheduler is never re-entered from its
// own callback and the run stays deterministic.
type admitter struct {
	f       *fleet
	sched   *admission.Scheduler
	clock   *virtualClock
	seeding bool            // the policy may seed: redeem each credit's proof for it
	ids     []string        // request ids, by request index
	specs   []partitionSpec // the workload's, or defaultPartitions
	parts   map[string]int32
	queued  int // requests waiting for a credit
	pending []delivery
}

// delivery is the scheduler's answer for request i.
type delivery struct {
	i      int
	credit *admission.Credit
	err    error
}

func (a *admitter) init(f *fleet) error {
	a.f = f
	a.clock = &virtualClock{now: &f.now}
	a.specs = f.wl.Partitions
	if len(a.specs) == 0 {
		a.specs = defaultPartitions()
	}
	a.parts = make(map[string]int32, len(a.specs))
	parts := make([]admission.Partition, len(a.specs))
	for i, p := range a.specs {
		a.parts[p.Name] = int32(i)
		parts[i] = admission.Partition{Name: p.Name, Weight: p.Weight}
	}
	capacity := &fleetCapacity{
		pool:   f.pool,
		router: f.router,
		maxAge: f.cfg.TelemetryMaxAge,
		now:    a.clock.Now,
	}
	sched, err := admission.NewScheduler(admission.Config{
		Mode:                 f.cfg.Admission.Mode,
		Partitions:           parts,
		DefaultPartition:     parts[0].Name,
		MaxQueuePerPartition: f.cfg.Admission.MaxQueue,
		QueueTimeout:         f.cfg.Admission.QueueTimeout,
	}, capacity, a.clock, nil)
	if err != nil {
		return err
	}
	a.sched = sched
	if ca, ok := f.router.Policy().(*routing.CacheAware); ok {
		a.seeding = ca.Seeding()
	}
	a.ids = make([]string, len(f.wl.Requests))
	for i := range f.wl.Requests {
		name := f.wl.Requests[i].Partition
		if name == "" {
			continue // the default partition, index 0
		}
		p, ok := a.parts[name]
		if !ok {
			return fmt.Errorf("request %d: partition %q is not one of the workload's (%s)",
				i, name, strings.Join(partitionNames(a.specs), ","))
		}
		f.states[i].partition = p
	}
	return nil
}

// submit asks admission for request i's credit.
func (a *admitter) submit(i int) {
	f := a.f
	r := &f.wl.Requests[i]
	a.ids[i] = strconv.Itoa(i)
	cost := f.router.EstimatedWork(&routing.Request{PromptTokens: r.PromptTokens, MaxTokens: r.OutputTokens})
	t := a.sched.Submit(admission.Request{ID: a.ids[i], Model: f.wl.Model, Partition: r.Partition, Cost: cost},
		func(c *admission.Credit, err error) { a.pending = append(a.pending, delivery{i, c, err}) })
	if t != nil {
		f.states[i].queued = true
		a.queued++
	}
}

// flush acts on the scheduler's deliveries in order, including those that
// acting on earlier ones (a routed credit frees the scheduler's slot) brings.
func (a *admitter) flush() error {
	for k := 0; k < len(a.pending); k++ {
		d := a.pending[k]
		st := &a.f.states[d.i]
		if st.queued {
			st.queued = false
			a.queued--
		}
		if d.err != nil {
			// 429 (queue full) or 503 (queue timeout): the client's answer.
			a.f.reject(d.i)
			continue
		}
		if err := a.f.dispatch(d.i, d.credit); err != nil {
			a.pending = a.pending[:0]
			return err
		}
	}
	a.pending = a.pending[:0]
	return nil
}
