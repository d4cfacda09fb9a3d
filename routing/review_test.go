package routing

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vLLM reports no batch limit; without a max_running hint an owner's queue
// must still count, or the incident repeats: 38 running, 100 waiting, KV 0.6.
func TestQueueIsPressureWhenCapacityIsUnknown(t *testing.T) {
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3)
	f.own(p, "w0")
	for i := range f.pool {
		f.pool[i].Load = Load{KVUsage: 0.1, SampledAt: f.now, Complete: true} // capacity unknown
	}
	f.pool[0].Load = Load{Running: 38, Waiting: 100, KVUsage: 0.6, SampledAt: f.now, Complete: true}
	d := f.route(p)
	assert.Equal(t, LabelPressureSpill, d.Label, "a waiting queue means full")
	assert.NotEqual(t, "w0", d.Worker.ID)
}

// An owner whose pressure is unknown fails open, but must not set the
// baseline that makes a known, lightly loaded owner look unsuitable.
func TestUnknownOwnerDoesNotStarveKnownOwners(t *testing.T) {
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3)
	f.own(p, "w0")
	f.own(p, "w1")
	f.pool[0].Load = Load{KVUsage: -1}                                                                 // never reported, capacity unknown
	f.pool[1].Load = Load{Running: 30, MaxRunning: 100, KVUsage: -1, SampledAt: f.now, Complete: true} // 0.3, with room
	counts := map[string]int{}
	var held []*Decision
	for range 20 {
		d := f.route(p)
		require.Equal(t, LabelOwnerHit, d.Label)
		counts[d.Worker.ID]++
		held = append(held, d)
	}
	assert.InDelta(t, 10, counts["w1"], 2, "both owners suitable, shared by reserved work: %v", counts)
	for _, d := range held {
		d.Done(OutcomeSuccess)
	}
}

// Owners that cannot take the request (excluded by a retry, unhealthy) do
// not deepen the match: a candidate holding most of the prefix still wins.
func TestMatchLooksAmongCandidatesOnly(t *testing.T) {
	f := newFleet(t, 6, nil)
	p := prompt(1, 2, 3, 4)
	f.own(p, "w0")     // the whole prompt ...
	f.own(p[:3], "w5") // ... and most of it
	d := f.route(p, "w0")
	assert.Equal(t, LabelOwnerHit, d.Label)
	assert.Equal(t, "w5", d.Worker.ID)
	assert.Equal(t, 3, d.MatchedBlocks)
}

// A worker that came back as a new incarnation (restarted: its cache is
// gone) owns nothing any more.
func TestNewGenerationDropsOwnership(t *testing.T) {
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3)
	first := f.route(p)
	first.Done(OutcomeSuccess)
	i := indexOf(candidatesOf(f.pool), first.Worker.ID)
	assert.Equal(t, LabelOwnerHit, f.route(p).Label)

	f.pool[i].Generation++
	d := f.route(prompt(9, 9)) // any request lets the router see the new generation
	d.Done(OutcomeSuccess)
	matched, _ := f.policy.Index().Match(p, f.now, nil, nil)
	assert.Zero(t, matched, "the restarted worker's ownership was dropped")
}

// Releasing reservations of a removed worker does not touch the counters of
// the worker re-added under the same id.
func TestReservationsOfARemovedWorkerStayWithIt(t *testing.T) {
	f := newFleet(t, 1, nil)
	var old []*Decision
	for range 5 {
		old = append(old, f.route(prompt(1)))
	}
	f.router.RemoveWorker("w0")
	fresh := f.route(prompt(2))
	for _, d := range old {
		d.Done(OutcomeSuccess)
	}
	n, tok := f.router.Reserved("w0")
	assert.Equal(t, 1, n, "only the new incarnation's reservation")
	assert.Equal(t, f.router.EstimatedWork(&Request{PromptTokens: 1000, MaxTokens: 10}), tok)
	fresh.Done(OutcomeSuccess)
	n, tok = f.router.Reserved("w0")
	assert.Zero(t, n)
	assert.Zero(t, tok)
}

// A request that did not succeed leaves no ownership behind: the worker never
// computed those blocks. What the worker held before stays.
func TestFailedRequestsLeaveNoOwnership(t *testing.T) {
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3, 4)
	d := f.route(p)
	require.Equal(t, LabelColdP2C, d.Label)
	d.Done(OutcomeFailure)
	matched, _ := f.policy.Index().Match(p, f.now, nil, nil)
	assert.Zero(t, matched)

	f.own(p[:2], "w1")
	d = f.route(p, "w0", "w2")
	require.Equal(t, "w1", d.Worker.ID)
	d.Done(OutcomeCancelled)
	matched, owners := f.policy.Index().Match(p, f.now, nil, nil)
	assert.Equal(t, 2, matched, "the blocks w1 held before are kept")
	assert.Equal(t, []string{"w1"}, workerIDs(owners))
}

// The match ratio reports what the chosen worker held, not what the index
// knew: a spill destination held nothing.
func TestMatchedBlocksAreTheChosenWorkers(t *testing.T) {
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3)
	f.own(p, "w0")
	f.setLoad(0, 10)
	d := f.route(p)
	require.Equal(t, LabelPressureSpill, d.Label)
	assert.Zero(t, d.MatchedBlocks)
}

// Seed 001 again, with the owner really loaded (pressure 0.8 against idle
// peers): extensions of its prefix still stay with it.
func TestExtensionsStayWithALoadedOwner(t *testing.T) {
	f := newFleet(t, 4, nil)
	turn := []uint64{1, 2}
	first := f.route(prompt(turn...))
	owner := indexOf(candidatesOf(f.pool), first.Worker.ID)
	first.Done(OutcomeSuccess)
	f.setLoad(owner, 8)
	for i := range 5 {
		turn = append(turn, uint64(100+i))
		d := f.route(prompt(turn...))
		assert.Equal(t, f.pool[owner].ID, d.Worker.ID, "turn %d", i+2)
		assert.Equal(t, LabelOwnerHit, d.Label)
		d.Done(OutcomeSuccess)
	}
}

// One spill per cooldown window, as the clock moves.
func TestOneSpillPerCooldownWindow(t *testing.T) {
	f := newFleet(t, 8, nil)
	p := prompt(1, 2, 3)
	f.own(p, "w0")
	spills := 0
	full := map[int]bool{0: true} // owners fill up as soon as they are made
	for step := range 50 {
		f.now = epoch.Add(time.Duration(step) * 100 * time.Millisecond)
		for i := range f.pool {
			f.setLoad(i, 0)
			if full[i] {
				f.setLoad(i, 10)
			}
		}
		d := f.route(p)
		if d.Label == LabelPressureSpill {
			spills++
			full[indexOf(candidatesOf(f.pool), d.Worker.ID)] = true
		}
		d.Done(OutcomeSuccess)
	}
	// 5 s of routing with a 1 s cooldown: at most one spill a second, and the
	// ceiling (4 owners) stops it after three.
	assert.Equal(t, 3, spills)
}
