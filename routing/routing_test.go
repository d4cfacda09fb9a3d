package routing

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixedPool serves the same endpoints for every model.
type fixedPool []Endpoint

func (p fixedPool) Candidates(_ string, dst []Endpoint) []Endpoint { return append(dst, p...) }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func endpoints(n int) fixedPool {
	p := make(fixedPool, n)
	for i := range p {
		p[i] = Endpoint{ID: fmt.Sprintf("w%d", i), Generation: 1, Revision: 1}
	}
	return p
}

func newRouter(t *testing.T, policy string, seed uint64, clock Clock) *Router {
	t.Helper()
	p, err := NewPolicy(policy, DefaultPolicyConfig())
	require.NoError(t, err)
	if clock == nil {
		clock = func() time.Time { return epoch }
	}
	return NewRouter(p, Options{MaxAge: 5 * time.Second, OutputEstimateCap: 256, Clock: clock, Rand: rand.New(rand.NewPCG(seed, seed))})
}

var allPolicies = PolicyNames

// TestPolicyConformance runs every policy through the same contract.
func TestPolicyConformance(t *testing.T) {
	for _, name := range allPolicies {
		t.Run(name, func(t *testing.T) {
			t.Run("never picks an excluded worker", func(t *testing.T) {
				r := newRouter(t, name, 1, nil)
				for range 200 {
					d, err := r.Route(&Request{Model: "m", PromptTokens: 10, Exclude: []string{"w0", "w2"}}, endpoints(4))
					require.NoError(t, err)
					assert.NotContains(t, []string{"w0", "w2"}, d.Worker.ID)
					d.Done(OutcomeSuccess)
				}
			})
			t.Run("picks only among the pool's candidates", func(t *testing.T) {
				r := newRouter(t, name, 2, nil)
				pool := endpoints(5)[2:]
				for range 100 {
					d, err := r.Route(&Request{Model: "m"}, pool)
					require.NoError(t, err)
					assert.Contains(t, []string{"w2", "w3", "w4"}, d.Worker.ID)
					d.Done(OutcomeSuccess)
				}
			})
			t.Run("no candidate is ErrNoWorker", func(t *testing.T) {
				r := newRouter(t, name, 3, nil)
				_, err := r.Route(&Request{Model: "m"}, fixedPool{})
				assert.ErrorIs(t, err, ErrNoWorker)
				_, err = r.Route(&Request{Model: "m", Exclude: []string{"w0"}}, endpoints(1))
				assert.ErrorIs(t, err, ErrNoWorker)
			})
			t.Run("releases every reservation exactly once", func(t *testing.T) {
				r := newRouter(t, name, 4, nil)
				pool := endpoints(3)
				var ds []*Decision
				for range 30 {
					d, err := r.Route(&Request{Model: "m", PromptTokens: 100, MaxTokens: 50}, pool)
					require.NoError(t, err)
					ds = append(ds, d)
				}
				total := 0
				for _, e := range pool {
					n, tok := r.Reserved(e.ID)
					total += n
					assert.Equal(t, n*150, tok)
				}
				assert.Equal(t, 30, total)
				for i, d := range ds {
					d.Done(Outcome(i % 3))
					d.Done(OutcomeSuccess) // a second Done is a no-op
				}
				for _, e := range pool {
					n, tok := r.Reserved(e.ID)
					assert.Zero(t, n)
					assert.Zero(t, tok)
				}
			})
			t.Run("deterministic with a seeded random source", func(t *testing.T) {
				run := func() []string {
					r := newRouter(t, name, 42, nil)
					var ids []string
					for i := range 50 {
						prefix := ChainIDs(3, []uint64{uint64(i % 7), uint64(i % 3)}, nil)
						d, err := r.Route(&Request{Model: "m", PromptTokens: 10 * i, Prefix: prefix}, endpoints(5))
						require.NoError(t, err)
						ids = append(ids, d.Worker.ID)
						if i%2 == 0 {
							d.Done(OutcomeSuccess)
						}
					}
					return ids
				}
				assert.Equal(t, run(), run())
			})
			t.Run("spreads distinct prompts over every worker", func(t *testing.T) {
				r := newRouter(t, name, 5, nil)
				counts := map[string]int{}
				for i := range 400 {
					prefix := ChainIDs(1, []uint64{uint64(i), 1, 2, 3, 4}, nil)
					d, err := r.Route(&Request{Model: "m", PromptTokens: 100, Prefix: prefix}, endpoints(4))
					require.NoError(t, err)
					counts[d.Worker.ID]++
					d.Done(OutcomeSuccess)
				}
				require.Len(t, counts, 4)
				for id, n := range counts {
					assert.Greater(t, n, 50, "worker %s got a fair share", id)
				}
			})
			t.Run("concurrent routing balances reservations to zero", func(t *testing.T) {
				r := newRouter(t, name, 6, nil)
				pool := endpoints(4)
				var wg sync.WaitGroup
				for g := range 16 {
					wg.Go(func() {
						for i := range 200 {
							d, err := r.Route(&Request{Model: "m", PromptTokens: g + i}, pool)
							if err != nil {
								t.Error(err)
								return
							}
							d.Done(OutcomeSuccess)
						}
					})
				}
				wg.Wait()
				for _, e := range pool {
					n, tok := r.Reserved(e.ID)
					assert.Zero(t, n)
					assert.Zero(t, tok)
				}
			})
		})
	}
}

func TestLeastLoadAvoidsTheLoadedWorker(t *testing.T) {
	r := newRouter(t, "least_load", 7, nil)
	pool := endpoints(4)
	for i := range pool {
		pool[i].Load = Load{SampledAt: epoch, Complete: true, MaxRunning: 64}
	}
	pool[0].Load.Running, pool[0].Load.Waiting = 60, 40
	counts := map[string]int{}
	for range 300 {
		d, err := r.Route(&Request{Model: "m", PromptTokens: 100}, pool)
		require.NoError(t, err)
		counts[d.Worker.ID]++
		d.Done(OutcomeSuccess)
	}
	assert.Zero(t, counts["w0"], "a worker with 100 queued requests loses every pairing")
}

// Between two polls, reservations spread a burst: without them every request
// would see the same stale "idle" sample and land on one worker.
func TestLeastLoadSpreadsABurstBetweenPolls(t *testing.T) {
	r := newRouter(t, "least_load", 8, nil)
	pool := endpoints(4)
	for i := range pool {
		pool[i].Load = Load{SampledAt: epoch, Complete: true, MaxRunning: 64}
	}
	counts := map[string]int{}
	for range 40 { // held, not released: all in flight
		d, err := r.Route(&Request{Model: "m", PromptTokens: 100}, pool)
		require.NoError(t, err)
		counts[d.Worker.ID]++
	}
	for id, n := range counts {
		assert.InDelta(t, 10, n, 4, "worker %s", id)
	}
}

// A new sample already counts the requests dispatched before it: the
// reservations made before it stop adding to the load, yet still release
// cleanly afterwards.
func TestReservationsTurnOverWithEachSample(t *testing.T) {
	now := epoch
	r := newRouter(t, "round_robin", 9, func() time.Time { return now })
	pool := endpoints(1)
	pool[0].Load = Load{SampledAt: epoch, Complete: true, MaxRunning: 8}

	d1, err := r.Route(&Request{Model: "m", PromptTokens: 10, MaxTokens: 10}, pool)
	require.NoError(t, err)
	cands := func() Candidate {
		r.mu.Lock()
		defer r.mu.Unlock()
		rw := r.reservedFor(pool[0])
		return Candidate{Endpoint: pool[0], Fresh: true, ReservedReqs: rw.reqs, ReservedTokens: rw.tokens}
	}
	assert.Equal(t, 1, cands().ReservedReqs)

	now = epoch.Add(time.Second)
	pool[0].Load.SampledAt = now
	pool[0].Load.Running = 1 // the sample sees d1 running
	assert.Zero(t, cands().ReservedReqs, "d1 is in the sample now")

	d2, err := r.Route(&Request{Model: "m", PromptTokens: 10, MaxTokens: 10}, pool)
	require.NoError(t, err)
	d1.Done(OutcomeSuccess)
	assert.Equal(t, 1, cands().ReservedReqs, "releasing d1 leaves d2's reservation alone")
	d2.Done(OutcomeSuccess)
	assert.Zero(t, cands().ReservedReqs)
	n, tok := r.Reserved("w0")
	assert.Zero(t, n)
	assert.Zero(t, tok)
}

func TestPressure(t *testing.T) {
	c := Candidate{Fresh: true, ReservedReqs: 2, Endpoint: Endpoint{Load: Load{Running: 4, Waiting: 2, MaxRunning: 16, KVUsage: 0.2}}}
	p, ok := c.Pressure()
	require.True(t, ok)
	assert.InDelta(t, 0.5, p, 1e-9)
	c.Load.KVUsage = 0.95
	p, _ = c.Pressure()
	assert.InDelta(t, 0.95, p, 1e-9)
	c.Fresh = false
	_, ok = c.Pressure()
	assert.False(t, ok, "stale telemetry has no pressure")
}

func TestEstimatedWorkCapsOutput(t *testing.T) {
	r := newRouter(t, "random", 1, nil)
	assert.Equal(t, 100+256, r.EstimatedWork(&Request{PromptTokens: 100}))
	assert.Equal(t, 100+20, r.EstimatedWork(&Request{PromptTokens: 100, MaxTokens: 20}))
	assert.Equal(t, 100+256, r.EstimatedWork(&Request{PromptTokens: 100, MaxTokens: 100000}))
	// n completions share the prompt and each generates its own output.
	assert.Equal(t, 100+4*20, r.EstimatedWork(&Request{PromptTokens: 100, MaxTokens: 20, Choices: 4}))
	assert.Equal(t, 100+maxChoicesEstimate*256, r.EstimatedWork(&Request{PromptTokens: 100, Choices: 1 << 40}))
}

func BenchmarkRouteLeastLoad64(b *testing.B) {
	p, _ := NewPolicy("least_load", DefaultPolicyConfig())
	r := NewRouter(p, Options{Clock: func() time.Time { return epoch }, Rand: rand.New(rand.NewPCG(1, 1))})
	pool := endpoints(64)
	req := &Request{Model: "m", PromptTokens: 1000}
	b.ReportAllocs()
	for b.Loop() {
		d, err := r.Route(req, pool)
		if err != nil {
			b.Fatal(err)
		}
		d.Done(OutcomeSuccess)
	}
}

// A worker whose telemetry never turns fresh (a wrong engine, a rank that
// never reports) must not look emptiest next to fresh peers with a queue.
func TestPowerOfTwoDoesNotMistakeUnknownForHeadroom(t *testing.T) {
	r := newRouter(t, "least_load", 11, nil)
	pool := endpoints(2)
	pool[0].Load = Load{Running: 30, MaxRunning: 64, SampledAt: epoch, Complete: true} // fresh, busy with others' traffic
	pool[1].Load = Load{}                                                              // never reported
	var held []*Decision
	counts := map[string]int{}
	for range 40 {
		d, err := r.Route(&Request{Model: "m", PromptTokens: 100}, pool)
		require.NoError(t, err)
		counts[d.Worker.ID]++
		held = append(held, d)
	}
	assert.InDelta(t, 20, counts["w1"], 2, "compared by this gateway's own in-flight work, the two split evenly: %v", counts)
	for _, d := range held {
		d.Done(OutcomeSuccess)
	}
}

// One formula for a worker's free slots: fresh telemetry less what was
// routed since, else the configured capacity less the gateway's in-flight;
// unknown capacity is none.
func TestLoadHeadroom(t *testing.T) {
	l := Load{Running: 3, Waiting: 2, MaxRunning: 8, Inflight: 6}
	assert.Equal(t, 1, l.Headroom(true, 2))
	assert.Equal(t, -3, l.Headroom(true, 6), "over capacity is negative")
	assert.Equal(t, 2, l.Headroom(false, 99), "without fresh telemetry reservations are the in-flight count")
	assert.Zero(t, Load{Inflight: 1}.Headroom(false, 0), "unknown capacity")
}
