package routing

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a request that does not succeed takes back from the index: exactly
// what its own decision added, never what the worker held before, what a
// concurrent request recorded since, or an engine's authoritative word.

func TestFailureKeepsOwnershipAConcurrentRequestRecorded(t *testing.T) {
	f := newFleet(t, 4, nil)
	p := prompt(1, 2, 3, 4)
	a := f.route(p)
	require.Equal(t, LabelColdP2C, a.Label)
	b := f.route(p) // coalesces on a's worker while a is in flight
	require.Equal(t, LabelOwnerHit, b.Label)
	require.Equal(t, a.Worker.ID, b.Worker.ID)
	a.Done(OutcomeCancelled)
	b.Done(OutcomeSuccess) // the worker computed the prefix for b
	matched, owners := f.policy.Index().Match(p, f.now, nil, nil)
	assert.Equal(t, 4, matched)
	assert.Equal(t, []string{a.Worker.ID}, workerIDs(owners))
}

func TestFailureAloneWithdrawsWhatItRecorded(t *testing.T) {
	f := newFleet(t, 4, nil)
	p := prompt(1, 2, 3, 4)
	a := f.route(p)
	a.Done(OutcomeFailure)
	matched, _ := f.policy.Index().Match(p, f.now, nil, nil)
	assert.Zero(t, matched)
}

func TestFailedSpillKeepsWhatTheDestinationHeldBefore(t *testing.T) {
	f := newFleet(t, 2, nil)
	sys := prompt(1, 2)        // a shared system prompt
	sess := prompt(1, 2, 3, 4) // a session on it
	f.own(sys, "w1")           // w1 served the system prompt earlier
	f.own(sess, "w0")
	f.setLoad(0, 10) // w0 full
	d := f.route(prompt(1, 2, 3, 4, 5))
	require.Equal(t, LabelPressureSpill, d.Label)
	require.Equal(t, "w1", d.Worker.ID)
	d.Done(OutcomeFailure)
	matched, _ := f.policy.Index().Match(sys, f.now, []string{"w1"}, nil)
	assert.Equal(t, 2, matched, "w1 keeps the system prompt")
	matched, _ = f.policy.Index().Match(sess, f.now, []string{"w1"}, nil)
	assert.Equal(t, 2, matched, "and loses what the failed spill added")
}

func TestFailedSGLangMissKeepsWhatTheWorkerHeldBefore(t *testing.T) {
	cfg := DefaultPolicyConfig()
	pol := NewSGLangCacheAware(cfg, NewIndex(cfg.IndexMaxBlocks, cfg.IndexTTL))
	now := epoch
	r := NewRouter(pol, Options{Clock: func() time.Time { return now }})
	pool := endpoints(1)
	pool[0].Load = Load{KVUsage: -1}
	long := prompt(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	pol.Index().Record(long[:2], "w0", KindApproximate, now, 0) // 2 of 10 blocks: a miss at 0.3
	d, err := r.Route(&Request{Model: "m", Prefix: long}, pool)
	require.NoError(t, err)
	require.Equal(t, LabelSGLangCacheMiss, d.Label)
	d.Done(OutcomeFailure)
	matched, _ := pol.Index().Match(long, now, nil, nil)
	assert.Equal(t, 2, matched)
}

func TestWithdrawNeverDropsAuthoritativeOwnership(t *testing.T) {
	x := NewIndex(1<<10, time.Minute)
	p := prompt(1, 2, 3)
	// Records the call created, one of them authoritative: its stamp is the
	// call's, and still Withdraw leaves it.
	st := x.Record(p, "a", KindApproximate, epoch, 0)
	x.mu.Lock()
	e := x.at(x.slots[p[0]])
	e.owners[0].kind = KindAuthoritative
	x.mu.Unlock()
	x.Withdraw(p, st)
	matched, owners := x.Match(p, epoch, nil, nil)
	assert.Equal(t, 1, matched, "the engine's word stands, the rest is gone")
	require.Len(t, owners, 1)
	assert.Equal(t, KindAuthoritative, owners[0].Kind)
}

// A seed in flight is invisible for the blocks it adds, but it does not hide
// what the peer already held, and a failed seed takes back only its own.
func TestSeedNeitherHidesNorErasesThePeersOwnership(t *testing.T) {
	sf := newSeedFleet(t, 2, nil)
	sf.own(sf.prefix[:2], "w1") // the peer holds the system prompt
	seed := sf.route(sf.req("p", sf.prefix))
	require.Equal(t, LabelSeedDispatch, seed.Label)
	require.Equal(t, "w1", seed.Worker.ID)
	m, _ := sf.policy.Index().Match(sf.prefix, sf.now, []string{"w1"}, nil)
	assert.Equal(t, 2, m, "visible for what it held, invisible for what the seed adds")
	seed.Done(OutcomeFailure)
	m, _ = sf.policy.Index().Match(sf.prefix, sf.now, []string{"w1"}, nil)
	assert.Equal(t, 2, m)
}

func TestSeedCommittingAfterItsWorkerLeftRecordsNothing(t *testing.T) {
	sf := newSeedFleet(t, 2, nil)
	seed := sf.route(sf.req("p", sf.prefix))
	require.Equal(t, LabelSeedDispatch, seed.Label)
	sf.router.RemoveWorker("w1")
	seed.Done(OutcomeSuccess)
	sf.pool[1].Generation++ // re-added as a new incarnation
	sf.setLoad(0, 0)
	_, owners := sf.policy.Index().Match(sf.prefix, sf.now, nil, nil)
	assert.NotContains(t, workerIDs(owners), "w1")
}

// A removed worker's records never count again, however many times its slot
// is reused: generations are 16 bits, and the slot is swept when they wrap.
func TestRemovedIncarnationsStayGone(t *testing.T) {
	x := NewIndex(1<<10, 10*time.Minute)
	old := prompt(1, 2, 3)
	x.Record(old, "w0", KindApproximate, epoch, 0)
	x.Record(old[:1], "w0", KindAuthoritative, epoch, 0)
	other := prompt(9)
	for range 1 << 16 {
		x.RemoveWorker("w0")
		x.Record(other, "w0", KindApproximate, epoch, 0)
	}
	m, _ := x.Match(old, epoch, nil, nil)
	assert.Zero(t, m, "the first incarnation's cache is long gone")
	assert.Equal(t, 1, x.WorkerBlocks("w0"))
	checkIndex(t, x)
}

func TestRestartedWorkerOwnsNothingAfterManyRestarts(t *testing.T) {
	f := newFleet(t, 1, nil)
	p := prompt(1, 2, 3)
	f.route(p).Done(OutcomeSuccess)
	for range 300 {
		f.pool[0].Generation++
		f.route(prompt(7)).Done(OutcomeSuccess) // the router sees the new incarnation
	}
	d := f.route(p)
	assert.Equal(t, LabelColdP2C, d.Label)
	d.Done(OutcomeSuccess)
}

func TestNaNKVUsageIsNotReported(t *testing.T) {
	c := Candidate{Fresh: true, Endpoint: Endpoint{Load: Load{Running: 10, Waiting: 100, MaxRunning: 10, KVUsage: math.NaN(), Complete: true}}}
	p, ok := c.Pressure()
	assert.True(t, ok)
	assert.InDelta(t, 11.0, p, 1e-9, "the queue still counts")
	c.Load.MaxRunning, c.Load.Waiting = 0, 0
	_, ok = c.Pressure()
	assert.False(t, ok)
}

// A peer whose seed of a prefix failed is quarantined for that prefix and
// its descendants: for every decision of such a request, not only for
// choosing the next seed, and however much of the prefix is matched today.
func TestQuarantineHoldsWhenTheMatchIsShallower(t *testing.T) {
	sf := newSeedFleet(t, 3, nil) // w0 owns the prefix, full; ceiling 1
	sf.setLoad(2, 10)             // w2 full: w1 is the only clean peer
	seed := sf.route(sf.req("p", sf.prefix))
	require.Equal(t, LabelSeedDispatch, seed.Label)
	require.Equal(t, "w1", seed.Worker.ID)
	seed.Done(OutcomeFailure)

	// w0 leaves; w2 (full) holds the first two blocks only.
	sf.router.RemoveWorker("w0")
	sf.pool = sf.pool[1:]
	sf.own(sf.prefix[:2], "w2")
	d := sf.route(sf.req("p", sf.prefix))
	assert.NotEqual(t, "w1", d.Worker.ID, "got %s", d.Label)
	d.Done(OutcomeSuccess)
}

func TestQuarantinedPeerIsNoSpillDestination(t *testing.T) {
	sf := newSeedFleet(t, 4, func(c *PolicyConfig) { c.MaxCachedOwnersPerPrefix = 2 })
	sf.own(sf.prefix, "w3")
	sf.setLoad(3, 10)
	sf.setLoad(2, 10) // w1 is the only clean peer
	seed := sf.route(sf.req("p", sf.prefix))
	require.Equal(t, LabelSeedDispatch, seed.Label)
	require.Equal(t, "w1", seed.Worker.ID)
	seed.Done(OutcomeFailure)

	// One owner fewer: the prefix may spill, and w1 is the only worker not full.
	sf.router.RemoveWorker("w3")
	sf.pool = sf.pool[:3]
	d := sf.route(sf.req("p", sf.prefix))
	assert.NotEqual(t, "w1", d.Worker.ID, "got %s", d.Label)
	assert.NotEqual(t, LabelPressureSpill, d.Label)
	d.Done(OutcomeSuccess)

	// Its quarantine over, w1 is a destination again.
	sf.now = sf.now.Add(DefaultPolicyConfig().Seeding.FailureQuarantine)
	sf.setLoad(0, 10)
	sf.setLoad(2, 10)
	d = sf.route(sf.req("p", sf.prefix))
	assert.Equal(t, "w1", d.Worker.ID, "got %s", d.Label)
	d.Done(OutcomeSuccess)
}

func TestQuarantineForgetsLapsedFailures(t *testing.T) {
	sd := newSeeding(DefaultPolicyConfig().Seeding)
	for i := range 100 {
		at := epoch.Add(time.Duration(i) * time.Minute)
		sd.quarantineFor(uint64(i), "w", at, at.Add(time.Minute))
	}
	assert.Len(t, sd.quarantine, 1, "only the last failure is still quarantined")
	assert.Equal(t, []string{"w"}, sd.barred([]uint64{98, 99}, epoch.Add(99*time.Minute), nil))
	assert.Empty(t, sd.barred([]uint64{98}, epoch.Add(99*time.Minute), nil))
}

// prefix_hash's bound counts what the router has routed, not only what the
// proxy has already sent: a burst between the two spreads.
func TestPrefixHashBoundCountsRoutedRequests(t *testing.T) {
	r := newRouter(t, "prefix_hash", 1, nil)
	pool := endpoints(4)
	p := prompt(1, 2, 3, 4)
	counts := map[string]int{}
	var ds []*Decision
	for range 40 {
		d, err := r.Route(&Request{Model: "m", Prefix: p}, pool)
		require.NoError(t, err)
		counts[d.Worker.ID]++
		ds = append(ds, d)
	}
	for _, d := range ds {
		d.Done(OutcomeSuccess)
	}
	for id, n := range counts {
		assert.LessOrEqual(t, n, 13, "ceil(40/4 × 1.25) bounds %s: %v", id, counts)
	}
}

// A spill whose request fails gives the prefix its expansion back: the
// destination lost the ownership the spill gave it, and the next pressured
// request may spill again at once instead of waiting out the cooldown held on
// full owners.
func TestFailedSpillFreesThePrefixToSpillAgain(t *testing.T) {
	f, p, spill := spilled(t)
	next := f.route(p)
	assert.Equal(t, LabelOwnerHit, next.Label, "the destination is an owner while its spill runs")
	assert.Equal(t, spill.Worker.ID, next.Worker.ID)
	next.Done(OutcomeSuccess)
	// The destination did not compute it after all; next's success on it
	// keeps its own record, so take it out of the candidates too.
	spill.Done(OutcomeFailure)
	again := f.route(p, spill.Worker.ID)
	assert.Equal(t, LabelPressureSpill, again.Label)
	again.Done(OutcomeSuccess)
}

// A spill goes only to a worker clear of the high-water mark by the slack:
// one just under it would be over it once it computed the prefix, and its
// own prefixes would spill in turn.
func TestSpillDestinationIsClearOfTheHighWaterMark(t *testing.T) {
	f := newFleet(t, 3, nil) // high water 0.9, slack 0.1, 10 slots a worker
	p := prompt(1, 2, 3, 4)
	f.own(p, "w0")
	f.setLoad(0, 10)
	f.setLoad(1, 9) // 0.9: pressured
	f.setLoad(2, 8) // 0.8: under the mark, not clear of it
	d := f.route(p)
	assert.Equal(t, LabelNoSafeHomeHold, d.Label)
	assert.Equal(t, "w0", d.Worker.ID)
	d.Done(OutcomeSuccess)

	f.setLoad(2, 7) // 0.7: clear
	d = f.route(p)
	assert.Equal(t, LabelPressureSpill, d.Label)
	assert.Equal(t, "w2", d.Worker.ID)
	d.Done(OutcomeSuccess)
}

// The gateway keeps a failed attempt's reservation until its retry is routed,
// but settles the outcome first: the retry of a request whose spill failed
// sees the prefix free to spill again, to another worker.
func TestRetryOfAFailedSpillMaySpillAgain(t *testing.T) {
	f, p, spill := spilled(t)
	spill.Settle(OutcomeFailure)
	retry := f.route(p, spill.Worker.ID)
	spill.Done(OutcomeFailure)
	assert.Equal(t, LabelPressureSpill, retry.Label, "retry went to %s", retry.Worker.ID)
	assert.NotEqual(t, spill.Worker.ID, retry.Worker.ID)
	retry.Done(OutcomeSuccess)
	n, _ := f.router.Reserved(spill.Worker.ID)
	assert.Zero(t, n, "settling did not release the reservation twice, nor Done skip it")
}

// A record the worker already held is no request's to withdraw, even where
// it is not among the prefix's leading held blocks (the shared head's records
// lost to the owners-per-block cap).
func TestWithdrawKeepsNonLeadingBlocksTheWorkerHeld(t *testing.T) {
	x := NewIndex(1000, time.Hour)
	p := prompt(1, 2, 3, 4)
	x.Record(p, "w", KindApproximate, epoch, 0)
	later := epoch.Add(time.Second)
	for i := range maxOwnersPerBlock { // a popular shared system prompt
		x.Record(p[:2], fmt.Sprintf("o%d", i), KindApproximate, later, 0)
	}
	m, owners := x.Match(p, later, nil, nil)
	require.Equal(t, 4, m)
	require.Equal(t, []string{"w"}, workerIDs(owners), "w still holds the deep blocks")

	st := x.Record(p, "w", KindApproximate, later, 0) // a request routed to w...
	x.Withdraw(p, st)                                 // ...that failed
	m, _ = x.Match(p, later, nil, nil)
	assert.Equal(t, 4, m)
}

// spilled is a fleet of three whose only owner of p is full, and the spill
// decision of p's next request.
func spilled(t *testing.T) (*fleet, []uint64, *Decision) {
	t.Helper()
	f := newFleet(t, 3, nil)
	p := prompt(1, 2, 3, 4)
	f.own(p, "w0")
	f.setLoad(0, 10)
	spill := f.route(p)
	require.Equal(t, LabelPressureSpill, spill.Label)
	return f, p, spill
}
