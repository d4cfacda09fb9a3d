package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/admission"
	"github.com/kvgate/kvgate/routing"
)

// tenantWorkload is a hand-made workload whose requests alternate between
// the given partitions.
func tenantWorkload(parts []partitionSpec, reqs ...handRequest) *Workload {
	wl := handWorkload(16, reqs...)
	wl.Partitions = parts
	for i := range wl.Requests {
		wl.Requests[i].Partition = parts[i%len(parts)].Name
	}
	return wl
}

// assertNothingLeaked checks that every admission credit, routing
// reservation and in-flight count of a finished run was given back.
func assertNothingLeaked(t *testing.T, f *fleet) {
	t.Helper()
	st := f.adm.sched.Snapshot()
	assert.Zero(t, st.Outstanding, "credits neither routed nor released")
	for _, p := range st.Partitions {
		assert.Zero(t, p.Queued, "partition %s: queued", p.Name)
		assert.Zero(t, p.Inflight, "partition %s: in flight", p.Name)
	}
	assert.Zero(t, f.adm.queued)
	for _, e := range f.pool.endpoints {
		reqs, tokens := f.router.Reserved(e.ID)
		assert.Zero(t, reqs, "reservations on %s", e.ID)
		assert.Zero(t, tokens)
		assert.Zero(t, e.Load.Inflight)
	}
}

// One worker of one slot, four requests of a one-second prefill at once.
// Enforcing admission dispatches one (the fleet's only slot) and queues the
// rest; each finish frees the slot for the next, so they run one after
// another off admission's queue and the engine never queues.
func TestEnforceQueuesInAdmissionNotInTheEngine(t *testing.T) {
	parts := defaultPartitions()
	var reqs []handRequest
	for range 4 {
		reqs = append(reqs, handRequest{at: 0, prompt: 1000, output: 1})
	}
	cfg := testFleetConfig(1, stepEngine())
	cfg.Admission = admissionConfig{Mode: admission.ModeEnforce}
	f, r := runFleet(t, cfg, tenantWorkload(parts, reqs...), newPolicy(t, "least_load"))
	assert.Equal(t, 4, r.Completed)
	assert.Zero(t, r.MaxWaiting, "admission held the backlog")
	assert.InDelta(t, 4.0, r.TTFTP99, 1e-9, "the last waited three prefills")
	assertNothingLeaked(t, f)

	// Off: the engine's own queue takes the backlog instead.
	cfg.Admission = admissionConfig{Mode: admission.ModeOff}
	f, r = runFleet(t, cfg, tenantWorkload(parts, reqs...), newPolicy(t, "least_load"))
	assert.Equal(t, 4, r.Completed)
	assert.Equal(t, 3, r.MaxWaiting)
	assertNothingLeaked(t, f)
}

// Queue limits refuse at once (429) and queue timeouts refuse on a virtual
// timer (503): both are rejected requests of their partition, and leave
// nothing behind.
func TestQueueLimitsRejectPerPartition(t *testing.T) {
	parts := []partitionSpec{{"a", 1}, {"b", 1}}
	var reqs []handRequest
	for range 8 {
		reqs = append(reqs, handRequest{at: 0, prompt: 1000, output: 1})
	}
	tests := []struct {
		name      string
		adm       admissionConfig
		completed int
	}{
		// One dispatched, then one queued per partition; the other five
		// refused at once.
		{"queue full", admissionConfig{Mode: admission.ModeEnforce, MaxQueue: 1}, 3},
		// One dispatched; the rest wait, and those still waiting after 2.5 s
		// time out: the second finishes at 1 s and the third at 2 s, so
		// three complete.
		{"queue timeout", admissionConfig{Mode: admission.ModeEnforce, QueueTimeout: 2500 * time.Millisecond}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testFleetConfig(1, stepEngine())
			cfg.Admission = tt.adm
			f, r := runFleet(t, cfg, tenantWorkload(parts, reqs...), newPolicy(t, "least_load"))
			assert.Equal(t, tt.completed, r.Completed)
			assert.Equal(t, 8-tt.completed, r.Rejected)
			require.Len(t, r.Partitions, 2)
			rejected := 0
			for _, p := range r.Partitions {
				rejected += p.Rejected
				assert.Positive(t, p.Rejected, "partition %s", p.Name)
			}
			assert.Equal(t, r.Rejected, rejected)
			assertNothingLeaked(t, f)
		})
	}
}

// A saturated fleet serves two backlogged partitions by their weights: the
// fair share orders admission's queues, which is where the backlog waits.
func TestSaturatedPartitionsShareByWeight(t *testing.T) {
	// The workload's default length: its edges (an empty fleet admits
	// whoever comes first; the last queued requests drain) weigh on shorter
	// runs.
	wl, err := generate(generateParams{name: "two-tenants", model: "m", blockTokens: 16, seed: 1})
	require.NoError(t, err)
	cfg := testFleetConfig(8, defaultOptions().engine)
	cfg.Admission = wl.Admission
	f, r := runFleet(t, cfg, wl, newPolicy(t, "cache_aware"))
	require.Len(t, r.Partitions, 2)
	a, b := r.Partitions[0], r.Partitions[1]
	require.Equal(t, []string{"a", "b"}, []string{a.Name, b.Name})
	// The goal: within 10 % of the weights.
	assert.InDelta(t, 0.25, a.ServedShare, 0.025, "weight 1 of 4")
	assert.InDelta(t, 0.75, b.ServedShare, 0.025, "weight 3 of 4")
	assert.Greater(t, a.Rejected, b.Rejected, "the lighter partition's queue overflows more")
	assertNothingLeaked(t, f)
}

// One partition alone gets the whole fleet: the fair share is
// work-conserving.
func TestLonePartitionGetsTheWholeFleet(t *testing.T) {
	wl, err := generate(generateParams{name: "two-tenants", model: "m", blockTokens: 16, requests: 4000, seed: 1})
	require.NoError(t, err)
	alone := *wl
	alone.Requests = nil
	for _, r := range wl.Requests {
		if r.Partition == "a" {
			alone.Requests = append(alone.Requests, r)
		}
	}
	cfg := testFleetConfig(8, defaultOptions().engine)
	cfg.Admission = wl.Admission
	f, r := runFleet(t, cfg, &alone, newPolicy(t, "least_load"))
	assert.Equal(t, 1.0, r.Partitions[0].ServedShare)
	assert.Zero(t, r.Partitions[1].ServedTokens)
	// a sends 45 requests a second, about what the whole fleet serves: with
	// the fleet to itself, little is refused.
	assert.Less(t, float64(r.Rejected), 0.1*float64(len(alone.Requests)))
	assertNothingLeaked(t, f)
}

// The incident: with seeding, the hot prefix's owner no longer takes the
// whole hot partition, and the hot partition's tail latency collapses,
// while the fleet's hit rate barely moves.
func TestIncidentSeedingRelievesTheHotOwner(t *testing.T) {
	wl, err := generate(generateParams{name: "incident", model: "m", blockTokens: 16, requests: 2500, seed: 1})
	require.NoError(t, err)
	cfg := testFleetConfig(8, defaultOptions().engine)
	cfg.Admission = wl.Admission
	pc := routing.DefaultPolicyConfig()
	pc.MaxCachedOwnersPerPrefix = wl.MaxCachedOwners
	res := map[string]policyResult{}
	for _, name := range []string{"cache_aware", routing.SeedingVariant} {
		p, err := routing.NewPolicy(name, pc)
		require.NoError(t, err)
		f, r := runFleet(t, cfg, wl, p)
		assertNothingLeaked(t, f)
		res[name] = r
	}
	off, on := res["cache_aware"], res[routing.SeedingVariant]
	assert.Zero(t, off.Decisions[string(routing.LabelSeedDispatch)])
	assert.Positive(t, on.Decisions[string(routing.LabelSeedDispatch)])
	assert.LessOrEqual(t, 4*on.MaxWaiting, off.MaxWaiting, "max_waiting: seeding on %d, off %d", on.MaxWaiting, off.MaxWaiting)
	hot := func(r policyResult) partitionResult {
		require.Equal(t, "hot", r.Partitions[0].Name)
		return r.Partitions[0]
	}
	assert.LessOrEqual(t, 3*hot(on).TTFTP99, hot(off).TTFTP99, "hot partition's p99 TTFT")
	assert.InDelta(t, off.HitRate, on.HitRate, 0.05)
}

// The virtual clock fires timers in due order, equal times in the order
// they were set, and never a stopped one.
func TestVirtualClockFiresInOrder(t *testing.T) {
	var now time.Duration
	c := &virtualClock{now: &now}
	var fired []string
	c.AfterFunc(2*time.Second, func() { fired = append(fired, "b") })
	c.AfterFunc(time.Second, func() { fired = append(fired, "a") })
	stopped := c.AfterFunc(time.Second, func() { fired = append(fired, "stopped") })
	c.AfterFunc(2*time.Second, func() { fired = append(fired, "c") })
	c.AfterFunc(-time.Second, func() { fired = append(fired, "now") })
	assert.True(t, stopped.Stop())
	assert.False(t, stopped.Stop(), "a stopped timer stops once")
	for {
		at, ok := c.next()
		if !ok {
			break
		}
		now = at
		c.fire()
	}
	assert.Equal(t, []string{"now", "a", "b", "c"}, fired)
	assert.Equal(t, epoch.Add(2*time.Second), c.Now())
}

// Capacity is what the gateway's FleetCapacity computes: fresh telemetry's
// free slots less what was routed since the sample, the gateway's own
// in-flight count otherwise, never below zero.
func TestFleetCapacityCountsIssuableHeadroom(t *testing.T) {
	var now time.Duration
	pool := newTelemetryPool(3, 4)
	router := routing.NewRouter(&routing.RoundRobin{}, routing.Options{Clock: func() time.Time { return epoch.Add(now) }})
	c := &fleetCapacity{pool: pool, router: router, maxAge: 5 * time.Second, now: func() time.Time { return epoch.Add(now) }}

	assert.Equal(t, 12, c.Available(), "no telemetry yet, nothing in flight: the configured slots")
	pool.endpoints[0].Load = routing.Load{Running: 1, Waiting: 1, MaxRunning: 4, SampledAt: epoch, Complete: true}
	pool.endpoints[1].Load = routing.Load{Running: 4, Waiting: 3, MaxRunning: 4, SampledAt: epoch, Complete: true}
	pool.endpoints[2].Load.Inflight = 3
	assert.Equal(t, 2+0+1, c.Available(), "an overfull worker counts zero, not less")

	now = time.Second
	d, err := router.Route(&routing.Request{Model: "m", PromptTokens: 10}, &onePool{pool, 0})
	require.NoError(t, err)
	assert.Equal(t, 1+0+1, c.Available(), "a request routed since the sample takes a slot")
	d.Done(routing.OutcomeSuccess)
	assert.Equal(t, 3, c.Available())

	now = 6 * time.Second
	assert.Equal(t, 4+4+1, c.Available(), "stale telemetry: the configured slots less in-flight")
}

// onePool offers one worker of a telemetryPool.
type onePool struct {
	p *telemetryPool
	i int
}

func (o *onePool) Candidates(_ string, dst []routing.Endpoint) []routing.Endpoint {
	return append(dst, o.p.endpoints[o.i])
}

func TestSeedingRedeemsProofsOnlyForSeedingPolicies(t *testing.T) {
	wl := tenantWorkload(defaultPartitions(), handRequest{prompt: 100, output: 1})
	for name, want := range map[string]bool{"cache_aware": false, routing.SeedingVariant: true, "least_load": false} {
		f, err := newFleet(testFleetConfig(1, stepEngine()), wl, newPolicy(t, name))
		require.NoError(t, err)
		assert.Equal(t, want, f.adm.seeding, name)
		require.NoError(t, f.run(context.Background()))
	}
}

// --partitions splits a tenant-less workload: by prefix, every request
// opening with the same block belongs to one tenant and tenants get blocks
// in proportion to their weights; by request, each request is drawn.
func TestAssignPartitions(t *testing.T) {
	parts := []partitionSpec{{"a", 1}, {"b", 3}}
	t.Run("by prefix", func(t *testing.T) {
		var reqs []handRequest
		for i := range 2000 {
			reqs = append(reqs, handRequest{prompt: 64, output: 1, family: 1 + i%500}) // 500 openings, 4 requests each
		}
		wl := handWorkload(16, reqs...)
		require.NoError(t, assignPartitions(wl, parts, partitionByPrefix, 1))
		owner := map[uint64]string{}
		for _, r := range wl.Requests {
			if prev, ok := owner[r.Prefix[0]]; ok {
				require.Equal(t, prev, r.Partition, "one tenant per opening block")
			}
			owner[r.Prefix[0]] = r.Partition
		}
		b := 0
		for _, p := range owner {
			if p == "b" {
				b++
			}
		}
		require.Len(t, owner, 500)
		assert.InDelta(t, 0.75, float64(b)/float64(len(owner)), 0.06, "openings split by weight")
	})
	t.Run("by request", func(t *testing.T) {
		wl := genWorkload(t, "hot-prefix", 4000)
		require.NoError(t, assignPartitions(wl, parts, partitionByRequest, 1))
		b := 0
		for _, r := range wl.Requests {
			if r.Partition == "b" {
				b++
			}
		}
		assert.InDelta(t, 0.75, float64(b)/float64(len(wl.Requests)), 0.03, "requests split by weight, whatever their prompt")
	})
	t.Run("new weights for a workload's own tenants", func(t *testing.T) {
		wl := genWorkload(t, "incident", 100)
		require.NoError(t, overrideWeights(wl, []partitionSpec{{"hot", 5}, {"bg1", 1}, {"bg2", 1}, {"idle", 2}}))
		assert.Equal(t, 5.0, wl.Partitions[0].Weight)
		assert.Error(t, overrideWeights(wl, []partitionSpec{{"hot", 1}}), "every partition the workload sends in must be named")
	})
}
