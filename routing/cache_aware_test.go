package routing

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fleet is a cache_aware router over workers whose telemetry a test sets.
type fleet struct {
	t      *testing.T
	now    time.Time
	router *Router
	policy *CacheAware
	pool   fixedPool
}

func newFleet(t *testing.T, n int, mutate func(*PolicyConfig)) *fleet {
	cfg := DefaultPolicyConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	f := &fleet{t: t, now: epoch, pool: endpoints(n)}
	f.policy = NewCacheAware(cfg, NewIndex(cfg.IndexMaxBlocks, cfg.IndexTTL))
	f.router = NewRouter(f.policy, Options{MaxAge: 5 * time.Second, OutputEstimateCap: 100,
		Clock: func() time.Time { return f.now }, Rand: rand.New(rand.NewPCG(1, 2))})
	for i := range f.pool {
		f.setLoad(i, 0)
	}
	return f
}

// setLoad gives worker i fresh telemetry with running requests out of 10 slots.
func (f *fleet) setLoad(i, running int) {
	f.pool[i].Load = Load{Running: running, MaxRunning: 10, KVUsage: -1, SampledAt: f.now, Complete: true}
}

func (f *fleet) route(prefix []uint64, exclude ...string) *Decision {
	f.t.Helper()
	d, err := f.router.Route(&Request{Model: "m", PromptTokens: 1000, MaxTokens: 10, Prefix: prefix, Exclude: exclude}, f.pool)
	require.NoError(f.t, err)
	return d
}

// own makes worker the approximate owner of prefix.
func (f *fleet) own(prefix []uint64, worker string) {
	f.policy.Index().Record(prefix, worker, KindApproximate, f.now, 0)
}

func prompt(ids ...uint64) []uint64 { return ChainIDs(7, ids, nil) }

// Seed 001: the exact owner stays selected when another worker is cooler and
// an unrelated worker is over the global overload threshold.
func TestExactOwnerStaysSelectedDespiteCoolerPeerAndUnrelatedOverload(t *testing.T) {
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3, 4)
	f.own(p, "w0")
	f.setLoad(0, 5)  // owner: busy but below the high-water mark
	f.setLoad(1, 0)  // cooler peer
	f.setLoad(2, 20) // an unrelated worker far over any overload threshold
	for range 3 {
		d := f.route(p)
		assert.Equal(t, "w0", d.Worker.ID)
		assert.Equal(t, LabelOwnerHit, d.Label)
		d.Done(OutcomeSuccess)
	}
}

// Seed 001: when the only owner is pressured, the first request creates one
// provisional owner and the next request reuses it before any ownership
// event arrives.
func TestOnlyOwnerPressuredSpillsOnceAndTheNextRequestReusesIt(t *testing.T) {
	f := newFleet(t, 4, nil)
	p := prompt(1, 2, 3, 4)
	f.own(p, "w0")
	f.setLoad(0, 10) // the owner is full

	first := f.route(p)
	require.Equal(t, LabelPressureSpill, first.Label)
	dest := first.Worker.ID
	require.NotEqual(t, "w0", dest)

	_, owners := f.policy.Index().Match(p, f.now, nil, nil)
	kinds := map[string]OwnerKind{}
	for _, o := range owners {
		kinds[o.Worker] = o.Kind
	}
	assert.Equal(t, KindProvisional, kinds[dest], "the destination is a provisional owner at once")

	second := f.route(p)
	assert.Equal(t, dest, second.Worker.ID, "the next request reuses the new owner")
	assert.Equal(t, LabelOwnerHit, second.Label)
	third := f.route(append(p, prompt(1, 2, 3, 4, 5)[4]))
	assert.Equal(t, dest, third.Worker.ID, "an extension of the prefix follows it too")
	for _, d := range []*Decision{first, second, third} {
		d.Done(OutcomeSuccess)
	}

	f.now = f.now.Add(DefaultPolicyConfig().SpillCooldown + time.Second)
	_, owners = f.policy.Index().Match(p, f.now, nil, nil)
	for _, o := range owners {
		if o.Worker == dest {
			assert.Equal(t, KindApproximate, o.Kind, "after the cooldown the provisional owner is an ordinary owner")
		}
	}
}

// Seed 001: sequential prefix extensions stay on one owner despite
// request-count imbalance.
func TestSequentialPrefixExtensionsStayOnOneOwner(t *testing.T) {
	f := newFleet(t, 4, nil)
	turn := []uint64{1, 2}
	first := f.route(prompt(turn...))
	owner := first.Worker.ID
	held := []*Decision{first}
	for i := range 6 {
		turn = append(turn, uint64(100+i), uint64(200+i))
		d := f.route(prompt(turn...))
		assert.Equal(t, owner, d.Worker.ID, "turn %d", i+2)
		assert.Equal(t, LabelOwnerHit, d.Label)
		held = append(held, d) // the owner now has many more requests in flight than its peers
	}
	for _, d := range held {
		d.Done(OutcomeSuccess)
	}
}

// Seed 001: multiple owners share load by atomic reserved work.
func TestSeveralOwnersShareLoadByReservedWork(t *testing.T) {
	f := newFleet(t, 4, nil)
	p := prompt(1, 2, 3)
	f.own(p, "w1")
	f.own(p, "w2")
	counts := map[string]int{}
	var held []*Decision
	for range 10 {
		d := f.route(p)
		require.Equal(t, LabelOwnerHit, d.Label)
		counts[d.Worker.ID]++
		held = append(held, d)
	}
	assert.Equal(t, map[string]int{"w1": 5, "w2": 5}, counts, "reservations alternate the owners")
	for _, d := range held {
		d.Done(OutcomeSuccess)
	}
}

// Seed 001: the configured owner ceiling prevents pressure-driven expansion
// beyond the budget.
func TestCeilingStopsExpansion(t *testing.T) {
	f := newFleet(t, 4, func(c *PolicyConfig) { c.MaxCachedOwnersPerPrefix = 2 })
	p := prompt(1, 2, 3)
	f.own(p, "w0")
	f.own(p, "w1")
	f.setLoad(0, 10)
	f.setLoad(1, 9) // both owners pressured; w2, w3 idle
	d := f.route(p)
	assert.Equal(t, LabelCeilingHold, d.Label)
	assert.Equal(t, "w1", d.Worker.ID, "held on the least-pressured owner")
	d.Done(OutcomeSuccess)

	g := newFleet(t, 3, func(c *PolicyConfig) { c.MaxCachedOwnersPerPrefix = 0 })
	g.own(p, "w0")
	g.setLoad(0, 10)
	d = g.route(p)
	assert.Equal(t, LabelCeilingHold, d.Label, "a ceiling of 0 disables replication")
	assert.Equal(t, "w0", d.Worker.ID)
}

func TestNoSafeHomeHolds(t *testing.T) {
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3)
	f.own(p, "w0")
	for i := range 3 {
		f.setLoad(i, 10-i%2)
	}
	d := f.route(p)
	assert.Equal(t, LabelNoSafeHomeHold, d.Label)
	assert.Equal(t, "w0", d.Worker.ID)
}

// While a spill cools down, a request that finds every owner pressured
// does not spill again: it is held on the least-pressured owner, which need
// not be the destination (a destination still prefilling the prefix is the
// worst place to pile on).
func TestSpillCoalescesDuringCooldown(t *testing.T) {
	f := newFleet(t, 4, nil)
	p := prompt(1, 2, 3)
	f.own(p, "w0")
	f.setLoad(0, 10)
	first := f.route(p)
	require.Equal(t, LabelPressureSpill, first.Label)
	dest := indexOf(candidatesOf(f.pool), first.Worker.ID)
	f.setLoad(dest, 10) // the destination fills up within the cooldown ...
	f.setLoad(0, 9)     // ... while the first owner drains a little
	second := f.route(p)
	assert.Equal(t, LabelSpillCoalesced, second.Label, "no second spill while the first cools down")
	assert.Equal(t, "w0", second.Worker.ID, "held on the least-pressured owner")

	f.now = f.now.Add(DefaultPolicyConfig().SpillCooldown)
	for i := range f.pool {
		f.pool[i].Load.SampledAt = f.now
	}
	third := f.route(p)
	assert.Equal(t, LabelPressureSpill, third.Label, "after the cooldown a new spill may happen")
	assert.NotContains(t, []string{"w0", first.Worker.ID}, third.Worker.ID)
}

// Before any telemetry, the requests this gateway already has in flight on
// an owner count: a burst routed before the first sample still spills.
func TestOwnInflightCountsWithoutTelemetry(t *testing.T) {
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3)
	f.own(p, "w0")
	for i := range f.pool {
		f.pool[i].Load = Load{MaxRunning: 10, KVUsage: -1} // no sample yet
	}
	f.pool[0].Load.Inflight = 10
	d := f.route(p)
	assert.Equal(t, LabelPressureSpill, d.Label)
	assert.NotEqual(t, "w0", d.Worker.ID)

	g := newFleet(t, 3, nil)
	g.own(p, "w0")
	for i := range g.pool {
		g.pool[i].Load = Load{MaxRunning: 10, KVUsage: -1, Inflight: 3 * (1 - i%2)}
	}
	assert.Equal(t, LabelOwnerHit, g.route(p).Label, "below the high-water mark it stays, failing open")
}

func candidatesOf(p fixedPool) []Candidate {
	c := make([]Candidate, len(p))
	for i := range p {
		c[i].Endpoint = p[i]
	}
	return c
}

// Missing or stale telemetry fails open to known owners.
func TestStaleTelemetryFailsOpenToOwners(t *testing.T) {
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3)
	f.own(p, "w0")
	f.setLoad(0, 10)
	f.pool[0].Load.SampledAt = f.now.Add(-time.Minute) // stale: its "full" is not believed
	d := f.route(p)
	assert.Equal(t, LabelOwnerHit, d.Label)
	assert.Equal(t, "w0", d.Worker.ID)
}

// Seed 001: excluded or removed owners still fall back and age out.
func TestExcludedOrRemovedOwnersFallBackAndAgeOut(t *testing.T) {
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3)
	f.own(p, "w0")

	d := f.route(p, "w0") // a retry excluded the owner
	assert.Equal(t, LabelColdP2C, d.Label)
	assert.NotEqual(t, "w0", d.Worker.ID)
	d.Done(OutcomeFailure)

	g := newFleet(t, 3, nil)
	g.own(p, "w0")
	g.pool = g.pool[1:] // the owner left the pool (unhealthy, drained)
	d = g.route(p)
	assert.Equal(t, LabelColdP2C, d.Label)
	g.policy.Index().RemoveWorker("w0")
	_, owners := g.policy.Index().Match(p, g.now, nil, nil)
	for _, o := range owners {
		assert.NotEqual(t, "w0", o.Worker, "a removed worker's ownership is dropped")
	}

	h := newFleet(t, 3, nil)
	h.own(p, "w0")
	h.now = h.now.Add(DefaultPolicyConfig().IndexTTL + time.Second)
	for i := range h.pool {
		h.setLoad(i, 0)
	}
	matched, _ := h.policy.Index().Match(p, h.now, nil, nil)
	assert.Zero(t, matched, "approximate ownership ages out after the TTL")
	assert.Equal(t, LabelColdP2C, h.route(p).Label)
}

// Many goroutines routing the same prefix at once, its owner pressured: at
// most one spill per cooldown, and every reservation balances back to zero.
func TestConcurrentSpillsCoalesce(t *testing.T) {
	f := newFleet(t, 8, nil)
	p := prompt(1, 2, 3, 4, 5)
	f.own(p, "w0")
	f.setLoad(0, 10)
	var mu sync.Mutex
	labels := map[Label]int{}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 20 {
				d, err := f.router.Route(&Request{Model: "m", PromptTokens: 500, Prefix: p}, f.pool)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				labels[d.Label]++
				mu.Unlock()
				d.Done(OutcomeSuccess)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 1, labels[LabelPressureSpill], "one spill per cooldown: %v", labels)
	for _, e := range f.pool {
		n, tok := f.router.Reserved(e.ID)
		assert.Zero(t, n)
		assert.Zero(t, tok)
	}
}

// A cold prefix routed by many goroutines at once lands on one worker: the
// first decision records ownership inside the critical section, so the rest
// see an owner.
func TestConcurrentColdPrefixLandsOnce(t *testing.T) {
	f := newFleet(t, 8, nil)
	p := prompt(9, 9, 9)
	var mu sync.Mutex
	workers := map[string]int{}
	labels := map[Label]int{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			d, err := f.router.Route(&Request{Model: "m", PromptTokens: 500, Prefix: p}, f.pool)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			workers[d.Worker.ID]++
			labels[d.Label]++
			mu.Unlock()
			d.Done(OutcomeSuccess)
		})
	}
	wg.Wait()
	assert.Len(t, workers, 1, "all on the first owner: %v", workers)
	assert.Equal(t, 1, labels[LabelColdP2C])
}
