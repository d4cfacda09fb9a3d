package routing

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// oneShot is an admission proof: Claim succeeds once.
type oneShot struct{ used atomic.Bool }

var errReplayed = errors.New("replayed")

func (o *oneShot) Claim() error {
	if !o.used.CompareAndSwap(false, true) {
		return errReplayed
	}
	return nil
}

// seedFleet is seed 000's scenario: A owns the prefix and is full; B is
// clean with headroom; the ceiling is 1, so the ordinary path would hold.
type seedFleet struct {
	*fleet
	prefix []uint64
}

func newSeedFleet(t *testing.T, workers int, mutate func(*PolicyConfig)) *seedFleet {
	f := newFleet(t, workers, func(c *PolicyConfig) {
		c.MaxCachedOwnersPerPrefix = 1
		c.Seeding = SeedingConfig{Enabled: true, Partitions: []string{"p", "q"}, PartitionSeedCap: 1,
			SuccessCooldown: 10 * time.Second, FailureQuarantine: time.Minute, MaxAge: 2 * time.Second}
		if mutate != nil {
			mutate(c)
		}
	})
	sf := &seedFleet{fleet: f, prefix: prompt(1, 2, 3, 4)}
	f.own(sf.prefix, "w0")
	f.setLoad(0, 10) // A at its limit
	return sf
}

// req is a request of partition p for chain with a fresh one-shot proof.
func (sf *seedFleet) req(partition string, chain []uint64) *Request {
	return &Request{Model: "m", PromptTokens: 1000, MaxTokens: 10, Prefix: chain,
		Partition: partition, SingleTarget: true, Proof: &oneShot{}}
}

func (sf *seedFleet) route(r *Request) *Decision {
	sf.t.Helper()
	d, err := sf.router.Route(r, sf.pool)
	require.NoError(sf.t, err)
	return d
}

func (sf *seedFleet) owners(chain []uint64) []string {
	_, owners := sf.policy.Index().Match(chain, sf.now, nil, nil)
	return workerIDs(owners)
}

// Seed 000: one redeemed credit seeds exactly one clean peer; a second seed
// is rejected at the cap; ordinary requests cannot join the peer until the
// seed's terminal success commits its ownership.
func TestSeedOneCleanPeerThenCapThenCommit(t *testing.T) {
	sf := newSeedFleet(t, 2, nil)
	seed := sf.route(sf.req("p", sf.prefix))
	require.Equal(t, LabelSeedDispatch, seed.Label)
	assert.Equal(t, "w1", seed.Worker.ID)
	assert.True(t, seed.Seed())
	assert.Equal(t, []string{"w0"}, sf.owners(sf.prefix), "the seed is invisible to ordinary routing")

	other := prompt(9, 8, 7)
	sf.own(other, "w0")
	d := sf.route(sf.req("p", other))
	assert.Equal(t, LabelSeedRejectedCap, d.Label, "one seed in flight per partition")
	assert.Equal(t, "w0", d.Worker.ID)
	d.Done(OutcomeSuccess)

	for range 3 {
		d = sf.route(sf.req("q", sf.prefix))
		assert.Equal(t, LabelSeedRejectedInFlight, d.Label, "ordinary requests cannot join the seed")
		assert.Equal(t, "w0", d.Worker.ID)
		d.Done(OutcomeSuccess)
	}

	seed.Done(OutcomeSuccess) // terminal success commits
	assert.ElementsMatch(t, []string{"w0", "w1"}, sf.owners(sf.prefix))
	d = sf.route(sf.req("q", sf.prefix))
	assert.Equal(t, LabelOwnerHit, d.Label)
	assert.Equal(t, "w1", d.Worker.ID, "the committed peer takes ordinary traffic")
	d.Done(OutcomeSuccess)
	assert.Zero(t, sf.policy.SeedsInFlight("p"))
}

// Seed 000: incomplete or stale telemetry fails closed.
func TestSeedFailsClosedOnIncompleteOrStaleTelemetry(t *testing.T) {
	sf := newSeedFleet(t, 2, nil)
	sf.pool[1].Load.Complete = false
	d := sf.route(sf.req("p", sf.prefix))
	assert.Equal(t, LabelSeedRejectedTelemetry, d.Label)
	assert.Equal(t, "w0", d.Worker.ID)
	d.Done(OutcomeSuccess)

	sf = newSeedFleet(t, 2, nil)
	sf.pool[1].Load.SampledAt = sf.now.Add(-3 * time.Second) // fresh for routing (5 s), stale for seeding (2 s)
	proof := &oneShot{}
	r := sf.req("p", sf.prefix)
	r.Proof = proof
	d = sf.route(r)
	assert.Equal(t, LabelSeedRejectedTelemetry, d.Label)
	assert.False(t, proof.used.Load(), "a refused seed does not consume the proof")
}

// Seed 000: a worker replaced (new revision or generation) between the
// decision and the dispatch aborts the seed: no commit, no quarantine, and
// the prefix may seed again.
func TestSeedAbortedByAReplacedWorker(t *testing.T) {
	sf := newSeedFleet(t, 2, nil)
	seed := sf.route(sf.req("p", sf.prefix))
	require.Equal(t, LabelSeedDispatch, seed.Label)
	sf.pool[1].Revision++ // what the gateway re-verifies just before dispatch
	require.NotEqual(t, sf.pool[1].Revision, seed.Worker.Revision, "the lease is bound to the old revision")
	seed.Done(OutcomeCancelled) // the gateway fails the binding closed
	assert.Equal(t, []string{"w0"}, sf.owners(sf.prefix), "nothing committed")
	again := sf.route(sf.req("p", sf.prefix))
	assert.Equal(t, LabelSeedDispatch, again.Label, "no quarantine, the prefix may seed again")
}

// Seed 000: a replayed proof cannot seed.
func TestSeedRejectsAReplayedProof(t *testing.T) {
	sf := newSeedFleet(t, 2, nil)
	r := sf.req("p", sf.prefix)
	require.NoError(t, r.Proof.Claim()) // claimed elsewhere first
	d := sf.route(r)
	assert.Equal(t, LabelSeedRejectedProof, d.Label)
	assert.Equal(t, "w0", d.Worker.ID)
	d.Done(OutcomeSuccess)
	r = sf.req("p", sf.prefix)
	r.Proof = nil // no admission proof at all
	assert.Equal(t, LabelSeedRejectedProof, sf.route(r).Label)
}

// Seed 000: streaming and fan-out requests never seed; they keep their
// ordinary behaviour (held on the owner).
func TestStreamingAndFanoutNeverSeed(t *testing.T) {
	sf := newSeedFleet(t, 2, nil)
	r := sf.req("p", sf.prefix)
	r.Stream = true
	d := sf.route(r)
	assert.Equal(t, LabelSeedRejectedStreaming, d.Label)
	assert.Equal(t, "w0", d.Worker.ID)
	r = sf.req("p", sf.prefix)
	r.SingleTarget = false
	d = sf.route(r)
	assert.Equal(t, LabelSeedRejectedFanout, d.Label)
	assert.Equal(t, "w0", d.Worker.ID)
	r = sf.req("elsewhere", sf.prefix)
	assert.Equal(t, LabelSeedRejectedPartition, sf.route(r).Label, "only allowlisted partitions seed")
}

// Seed 000: a backend failure after the worker accepted the request
// quarantines the peer for the prefix and its descendants.
func TestSeedFailureQuarantinesThePeer(t *testing.T) {
	sf := newSeedFleet(t, 2, nil)
	seed := sf.route(sf.req("p", sf.prefix))
	require.Equal(t, LabelSeedDispatch, seed.Label)
	seed.Done(OutcomeFailure)
	assert.Equal(t, []string{"w0"}, sf.owners(sf.prefix), "a failed seed owns nothing")

	d := sf.route(sf.req("p", sf.prefix))
	assert.Equal(t, LabelSeedRejectedNoPeer, d.Label, "the only clean peer is quarantined")
	d.Done(OutcomeSuccess)
	descendant := append(append([]uint64(nil), sf.prefix...), prompt(1, 2, 3, 4, 5)[4])
	d = sf.route(sf.req("p", descendant))
	assert.Equal(t, LabelSeedRejectedNoPeer, d.Label, "and for the prefix's descendants")
	d.Done(OutcomeSuccess)

	sf.now = sf.now.Add(time.Minute + time.Second)
	for i := range sf.pool {
		sf.pool[i].Load.SampledAt = sf.now
	}
	assert.Equal(t, LabelSeedDispatch, sf.route(sf.req("p", sf.prefix)).Label, "the quarantine ends")
}

// A committed seed cools the prefix down: no second seed until it ends.
func TestSeedSuccessCooldown(t *testing.T) {
	sf := newSeedFleet(t, 3, nil)
	seed := sf.route(sf.req("p", sf.prefix))
	require.Equal(t, LabelSeedDispatch, seed.Label)
	seed.Done(OutcomeSuccess)
	sf.setLoad(indexOf(candidatesOf(sf.pool), seed.Worker.ID), 10) // the new owner fills up too
	d := sf.route(sf.req("p", sf.prefix))
	assert.Equal(t, LabelSeedRejectedCooldown, d.Label)
}

// Seed 000: concurrent ordinary-spill and seed acquisition on one prefix:
// one winner per window, never both.
func TestSpillAndSeedAreSerialized(t *testing.T) {
	sf := newSeedFleet(t, 8, func(c *PolicyConfig) { c.MaxCachedOwnersPerPrefix = 2 })
	var mu sync.Mutex
	labels := map[Label]int{}
	var wg sync.WaitGroup
	var held []*Decision
	for g := range 16 {
		wg.Go(func() {
			for i := range 20 {
				r := sf.req("p", sf.prefix)
				if (g+i)%2 == 0 {
					r.Partition = "q"
				}
				d, err := sf.router.Route(r, sf.pool)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				labels[d.Label]++
				held = append(held, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Below the ceiling the ordinary path spills once and then cools; no seed
	// may run beside the spill.
	assert.Equal(t, 1, labels[LabelPressureSpill], "%v", labels)
	assert.Zero(t, labels[LabelSeedDispatch], "no seed beside a cooling spill: %v", labels)
	for _, d := range held {
		d.Done(OutcomeSuccess)
	}

	// At the ceiling, many concurrent would-be seeders: one seed wins.
	sf2 := newSeedFleet(t, 8, nil)
	labels = map[Label]int{}
	held = held[:0]
	for range 16 {
		wg.Go(func() {
			d, err := sf2.router.Route(sf2.req("p", sf2.prefix), sf2.pool)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			labels[d.Label]++
			held = append(held, d)
			mu.Unlock()
		})
	}
	wg.Wait()
	assert.Equal(t, 1, labels[LabelSeedDispatch], "%v", labels)
	for _, d := range held {
		d.Done(OutcomeSuccess)
	}
	assert.Zero(t, sf2.policy.SeedsInFlight("p"))
	for _, e := range sf2.pool {
		n, _ := sf2.router.Reserved(e.ID)
		assert.Zero(t, n)
	}
}

// While a spill cools down, a request that finds every owner (the spill's
// destination too) full may not seed: the prefix's one expansion is taken.
func TestNoSeedWhileASpillCools(t *testing.T) {
	sf := newSeedFleet(t, 4, func(c *PolicyConfig) { c.MaxCachedOwnersPerPrefix = 2 })
	spill := sf.route(sf.req("p", sf.prefix))
	require.Equal(t, LabelPressureSpill, spill.Label)
	sf.setLoad(indexOf(candidatesOf(sf.pool), spill.Worker.ID), 10)
	d := sf.route(sf.req("p", sf.prefix))
	assert.Equal(t, LabelSpillCoalesced, d.Label, "held: the cooling spill is the prefix's one expansion")
	assert.False(t, d.Seed())
}
