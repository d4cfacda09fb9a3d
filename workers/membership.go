package workers

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// drainPoll is how often a drain looks whether its worker has gone idle.
// Polling keeps drain bookkeeping off the request path, where releasing a
// request stays one atomic add.
const drainPoll = 20 * time.Millisecond

// drains tracks the goroutines that wait for draining workers to go idle,
// and the old incarnations of replaced workers still finishing requests.
type drains struct {
	wg       sync.WaitGroup // Close waits for every drain
	replaced []*Worker      // guarded by Registry.mu
}

// Drain stops new requests from reaching worker id; those in flight finish.
// The worker stays registered and listed, draining, until it is removed.
func (r *Registry) Drain(id string) (*Worker, bool) {
	r.mu.Lock()
	e := r.entries[id]
	if e != nil {
		e.drained = true
	}
	r.mu.Unlock()
	if e == nil {
		return nil, false
	}
	if !e.w.draining.Swap(true) {
		r.opts.Logger.Info("worker draining", "worker", id, "inflight", e.w.Inflight())
		r.changed()
	}
	return e.w, true
}

// Retire drains worker id and removes it once it is idle: nothing in
// flight and, with Options.Pending, nothing routed to it either. Removal
// fires OnRemove, so routing forgets the worker. Retiring a worker already
// retiring changes nothing; Close ends a pending retirement.
func (r *Registry) Retire(id string) (*Worker, bool) {
	r.mu.Lock()
	e := r.entries[id]
	if e == nil {
		r.mu.Unlock()
		return nil, false
	}
	start := !e.w.removing.Swap(true) && !r.closed
	wasDraining := e.w.draining.Swap(true)
	if start {
		r.drains.wg.Add(1)
	}
	r.mu.Unlock()
	if start {
		r.opts.Logger.Info("worker draining before removal", "worker", id, "inflight", e.w.Inflight())
		go r.removeWhenIdle(e)
	}
	if !wasDraining {
		r.changed()
	}
	return e.w, true
}

func (r *Registry) removeWhenIdle(e *entry) {
	defer r.drains.wg.Done()
	retiring := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.entries[e.w.id] == e && e.w.removing.Load()
	}
	if r.awaitIdle(e.w, retiring, true) {
		r.remove(e.w.id, e)
	}
}

// Restore takes back the retirement of worker id before it completes: the
// same worker, same generation, keeps its routing state (prefix ownership)
// and takes new requests again as soon as its health checks pass, which
// went on while it drained. A worker drained with Drain stays drained: only
// the retirement is undone. It reports false when id is not retiring
// (unknown, already removed, or never retired).
func (r *Registry) Restore(id string) (*Worker, bool) {
	r.mu.Lock()
	e := r.entries[id]
	if e == nil || !e.w.removing.Load() {
		r.mu.Unlock()
		return nil, false
	}
	e.w.removing.Store(false)
	e.w.draining.Store(e.drained)
	drained := e.drained
	r.mu.Unlock()
	r.opts.Logger.Info("worker retirement cancelled", "worker", id, "generation", e.w.generation.Load(), "draining", drained)
	if !drained {
		r.changed()
	}
	return e.w, true
}

// awaitIdle waits until w has nothing in flight and, when pending is set,
// nothing routed to it. It gives up (false) when the registry closes or
// still() turns false.
func (r *Registry) awaitIdle(w *Worker, still func() bool, pending bool) bool {
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		if !still() {
			return false
		}
		if w.Inflight() == 0 && (!pending || r.opts.Pending == nil || r.opts.Pending(w.id) == 0) {
			return true
		}
		select {
		case <-r.ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// Replace swaps the worker registered under s.ID for a new incarnation built
// from s, with a new generation: decisions bound to the old one fail closed.
// The old incarnation leaves routing at once; its requests in flight finish,
// and it is listed by Replaced until they have. The new one is routable after
// its first healthy check, like any added worker. Without a worker under
// s.ID, Replace is Add.
func (r *Registry) Replace(s Spec) (*Worker, error) {
	if _, err := url.Parse(s.URL); err != nil {
		return nil, fmt.Errorf("worker %q: %w", s.ID, err)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	old := r.entries[s.ID]
	if old != nil {
		delete(r.entries, s.ID)
		old.w.removing.Store(true)
		old.w.draining.Store(true)
		r.drains.replaced = append(r.drains.replaced, old.w)
		r.drains.wg.Add(1)
		r.publishLocked()
	}
	r.mu.Unlock()
	if old == nil {
		return r.Add(s)
	}
	old.cancel()
	<-old.done
	// The old incarnation's routing state (ownership, reservation records)
	// goes with it, before the new one can be routed to.
	if r.opts.OnRemove != nil {
		r.opts.OnRemove(s.ID)
	}
	go r.forgetWhenIdle(old.w)
	w, err := r.Add(s)
	if err != nil {
		r.changed()
		return nil, err
	}
	r.opts.Logger.Info("worker replaced", "worker", s.ID, "url", s.URL,
		"old_generation", old.w.generation.Load(), "generation", w.generation.Load(), "inflight_on_old", old.w.Inflight())
	r.changed()
	return w, nil
}

func (r *Registry) forgetWhenIdle(w *Worker) {
	defer r.drains.wg.Done()
	drained := r.awaitIdle(w, func() bool { return true }, false)
	r.mu.Lock()
	r.drains.replaced = slices.DeleteFunc(r.drains.replaced, func(x *Worker) bool { return x == w })
	r.mu.Unlock()
	if drained {
		r.opts.Logger.Info("replaced worker drained", "worker", w.id, "generation", w.generation.Load())
	}
}

// Replaced returns the old incarnations of replaced workers that still have
// requests in flight (draining, never routable).
func (r *Registry) Replaced() []*Worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.drains.replaced)
}

// Update applies a changed models list and capacity hint to worker s.ID in
// place: same generation (its cache is intact), a new revision if what it
// serves or its capacity changed. It reports whether the worker exists.
func (r *Registry) Update(s Spec) (*Worker, bool) {
	w := r.Get(s.ID)
	if w == nil {
		return nil, false
	}
	rev := w.Identity().Revision
	w.respec(s.Models, s.MaxRunning)
	if w.Identity().Revision != rev {
		r.opts.Logger.Info("worker updated", "worker", s.ID, "models", w.Models(), "max_running", s.MaxRunning)
		r.changed()
	}
	return w, true
}

// Applied is what Apply did.
type Applied int

const (
	// AppliedNone: the worker already matched.
	AppliedNone Applied = iota
	// AppliedAdded: a new worker.
	AppliedAdded
	// AppliedRestored: a retirement taken back (same incarnation, same
	// generation, its prefixes kept), then updated if need be.
	AppliedRestored
	// AppliedUpdated in place: a new revision.
	AppliedUpdated
	// AppliedReplaced by a new incarnation: a new generation.
	AppliedReplaced
)

// ErrOtherOrigin is Apply's refusal of a spec whose id is held by a worker
// another source of membership registered.
var ErrOtherOrigin = errors.New("worker id held by a worker of another origin")

// Apply makes the registry hold a worker that matches s, changing as little
// as it can: it adds one, takes back a retirement (a worker listed again
// before its drain ended keeps its cache), updates models and capacity in
// place, or replaces the incarnation when the URL, engine, data-parallel size
// or key changed. It is the one step every source of membership (config
// reload, DNS discovery) reconciles with; each touches only workers of its
// own origin (s.Origin), and others are ErrOtherOrigin. An operator's drain
// stands (Restore never undoes it).
func (r *Registry) Apply(s Spec) (Applied, error) {
	w := r.Get(s.ID)
	if w == nil {
		_, err := r.Add(s)
		return AppliedAdded, err
	}
	if w.Origin() != s.Origin {
		return AppliedNone, ErrOtherOrigin
	}
	change := w.ChangeTo(s)
	if change == ChangeReplace {
		_, err := r.Replace(s)
		return AppliedReplaced, err
	}
	applied := AppliedNone
	if w.Removing() {
		if _, ok := r.Restore(s.ID); !ok {
			// Removed since Get: a fresh incarnation (Replace adds one).
			_, err := r.Replace(s)
			return AppliedReplaced, err
		}
		applied = AppliedRestored
	}
	if change == ChangeUpdate {
		r.Update(s)
		if applied == AppliedNone {
			applied = AppliedUpdated
		}
	}
	return applied, nil
}

// Change is what it takes to make a registered worker match a spec.
type Change int

const (
	// ChangeNone: the worker already matches.
	ChangeNone Change = iota
	// ChangeUpdate in place (Registry.Update): models or max_running differ.
	ChangeUpdate
	// ChangeReplace with a new incarnation (Registry.Replace): the URL,
	// engine or data-parallel size differ, so it is another process or
	// speaks another protocol.
	ChangeReplace
)

// ChangeTo says how w differs from s.
func (w *Worker) ChangeTo(s Spec) Change {
	engine := s.Engine
	if engine == "" {
		engine = EngineAuto
	}
	we := w.engine
	if we == "" {
		we = EngineAuto
	}
	// A new key means the engine restarted with it: its cache is gone.
	if strings.TrimRight(s.URL, "/") != w.baseURL || engine != we || max(s.DPRanks, 1) != w.dpRanks || s.APIKey != w.apiKey {
		return ChangeReplace
	}
	d := w.desc.Load()
	sameModels := len(s.Models) == 0 && (d.learned || len(d.models) == 0) ||
		!d.learned && slices.Equal(d.models, s.Models)
	if !sameModels || s.MaxRunning != d.maxRunning {
		return ChangeUpdate
	}
	return ChangeNone
}
