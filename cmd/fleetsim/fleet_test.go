package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/routing"
	"github.com/kvgate/kvgate/sim"
)

// stepEngine is an engine whose steps last exactly their prefill, at 1,000
// tokens a second, one request at a time: hand-checkable timelines.
func stepEngine() sim.Config {
	return sim.Config{MaxRunning: 1, KVCapacityTokens: 4096, BlockTokens: 16, PrefillTokensPerSec: 1000}
}

func testFleetConfig(workers int, engine sim.Config) fleetConfig {
	return fleetConfig{Workers: workers, Engine: engine, TelemetryInterval: time.Second, TelemetryMaxAge: 5 * time.Second, Seed: 1}
}

// handRequest is one request of a hand-made workload; requests of the same
// family (> 0) share their whole prompt, family 0 shares nothing.
type handRequest struct {
	at             time.Duration
	prompt, output int
	family         int
}

func handWorkload(bt int, reqs ...handRequest) *Workload {
	ids := &idSpace{}
	families := map[int]segment{}
	wl := &Workload{Name: "hand", Model: "m", BlockTokens: bt}
	for _, h := range reqs {
		var shared segment
		if h.family > 0 {
			if _, ok := families[h.family]; !ok {
				families[h.family] = segment{base: ids.newRange(), tokens: 1 << 30}
			}
			shared = families[h.family]
		}
		s := newStream("m", bt, shared, ids)
		s.extend(h.prompt)
		wl.Requests = append(wl.Requests, s.request(h.at, h.output))
	}
	return wl
}

func newPolicy(t testing.TB, name string) routing.Policy {
	t.Helper()
	p, err := routing.NewPolicy(name, routing.DefaultPolicyConfig())
	require.NoError(t, err)
	return p
}

func runFleet(t *testing.T, cfg fleetConfig, wl *Workload, p routing.Policy) (*fleet, policyResult) {
	t.Helper()
	f, err := newFleet(cfg, wl, p)
	require.NoError(t, err)
	require.NoError(t, f.run(context.Background()))
	return f, f.result(p.Name())
}

func TestHitRateCountsPromptTokensFoundInCache(t *testing.T) {
	distinct := make([]handRequest, 20)
	repeated := make([]handRequest, 20)
	for i := range distinct {
		distinct[i] = handRequest{at: time.Duration(i) * 2 * time.Second, prompt: 1024, output: 1}
		repeated[i] = handRequest{at: time.Duration(i) * 2 * time.Second, prompt: 1024, output: 1, family: 1}
	}
	tests := []struct {
		name    string
		workers int
		reqs    []handRequest
		want    float64
	}{
		{"every prompt distinct", 2, distinct, 0},
		// 19 repeats find 63 of the 64 blocks: the last block is always
		// recomputed, so that the engine has logits to sample from.
		{"one prompt repeated on one worker", 1, repeated, 19 * 63 * 16 / (20 * 1024.0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, r := runFleet(t, testFleetConfig(tt.workers, stepEngine()), handWorkload(16, tt.reqs...), newPolicy(t, "round_robin"))
			assert.InDelta(t, tt.want, r.HitRate, 1e-6)
			assert.Equal(t, 20, r.Completed)
			assert.Equal(t, int64(20*1024), r.PromptTokens)
			assert.Equal(t, f.stats.cachedTokens, r.CachedTokens, "the requests' events agree with the engines' counters")
		})
	}
}

// Two workers of one slot, three requests of a one-second prefill at once:
// round robin puts two on w0, so one waits; for a second both workers run
// one request (max/mean 1), for the next only w0 does (max/mean 2).
func TestMaxWaitingAndImbalanceOnAHandMadeTimeline(t *testing.T) {
	wl := handWorkload(16,
		handRequest{at: 0, prompt: 1000, output: 1},
		handRequest{at: 0, prompt: 1000, output: 1},
		handRequest{at: 0, prompt: 1000, output: 1},
	)
	_, r := runFleet(t, testFleetConfig(2, stepEngine()), wl, newPolicy(t, "round_robin"))
	assert.Equal(t, 1, r.MaxWaiting)
	assert.InDelta(t, 1.5, r.Imbalance, 1e-9)
	assert.Equal(t, 3, r.Completed)
	assert.InDelta(t, 2.0, r.MakespanS, 1e-9)
	assert.InDelta(t, 1.5, r.ThroughputTokensPerS, 1e-9, "3 output tokens in 2 s")
	assert.InDelta(t, 1.0, r.TTFTP50, 1e-9)
	assert.InDelta(t, 2.0, r.TTFTP99, 1e-9, "the request that waited")
	assert.InDelta(t, 2.0, r.E2EP99, 1e-9)
}

func TestRejectedRequestsAreCounted(t *testing.T) {
	t.Run("the engine cannot hold the request", func(t *testing.T) {
		wl := handWorkload(16,
			handRequest{at: 0, prompt: 1000, output: 1},
			handRequest{at: 0, prompt: 5000, output: 1}, // KV holds 4096 tokens
			handRequest{at: time.Second, prompt: 100, output: 1},
		)
		f, r := runFleet(t, testFleetConfig(1, stepEngine()), wl, newPolicy(t, "least_load"))
		assert.Equal(t, 1, r.Rejected)
		assert.Equal(t, 2, r.Completed)
		assert.Equal(t, map[string]int{"least_load": 3}, r.Decisions, "the router decided before the engine refused")
		reqs, tokens := f.router.Reserved("w0")
		assert.Zero(t, reqs, "the refused request's reservation was released")
		assert.Zero(t, tokens)
		assert.Zero(t, f.pool.endpoints[0].Load.Inflight)
	})
	t.Run("the router refuses", func(t *testing.T) {
		wl := handWorkload(16, handRequest{at: 0, prompt: 100, output: 1}, handRequest{at: time.Second, prompt: 100, output: 1})
		_, r := runFleet(t, testFleetConfig(2, stepEngine()), wl, refusingPolicy{})
		assert.Equal(t, 2, r.Rejected)
		assert.Zero(t, r.Completed)
		assert.Empty(t, r.Decisions)
		assert.Zero(t, r.TTFTP99)
	})
}

type refusingPolicy struct{}

func (refusingPolicy) Name() string { return "refusing" }
func (refusingPolicy) Select(*routing.Request, []routing.Candidate, *routing.Scratch) (int, routing.Label) {
	return -1, "refused"
}

// recordingPolicy routes round robin and records what the router showed it.
type recordingPolicy struct {
	next int
	seen []sighting
}

type sighting struct {
	now   time.Time
	loads []routing.Load
}

func (*recordingPolicy) Name() string { return "recording" }

func (p *recordingPolicy) Select(_ *routing.Request, cands []routing.Candidate, s *routing.Scratch) (int, routing.Label) {
	loads := make([]routing.Load, len(cands))
	for i, c := range cands {
		loads[i] = c.Load
	}
	p.seen = append(p.seen, sighting{now: s.Now, loads: loads})
	p.next++
	return p.next % len(cands), "recorded"
}

// The router sees running, waiting and KV usage as of the last telemetry
// tick, however much the engines changed since; only the gateway's own
// in-flight count is live.
func TestRouterSeesTelemetryOnlyAsOfTheLastTick(t *testing.T) {
	var reqs []handRequest
	for i := range 45 {
		reqs = append(reqs, handRequest{at: time.Duration(i) * 110 * time.Millisecond, prompt: 256, output: 40, family: 1 + i%3})
	}
	cfg := testFleetConfig(2, sim.DefaultConfig())
	p := &recordingPolicy{}
	f, _ := runFleet(t, cfg, handWorkload(sim.DefaultBlockTokens, reqs...), p)
	require.Len(t, p.seen, len(reqs))

	windows := map[time.Time][]sighting{}
	for _, s := range p.seen {
		tick := epoch.Add(s.now.Sub(epoch).Truncate(cfg.TelemetryInterval))
		for _, l := range s.loads {
			require.Equal(t, tick, l.SampledAt, "at %v the sample is from the last tick", s.now.Sub(epoch))
			assert.True(t, l.Complete)
			assert.Equal(t, cfg.Engine.MaxRunning, l.MaxRunning)
		}
		windows[tick] = append(windows[tick], s)
	}
	inflightMoved, sampleMoved := false, false
	var prev []routing.Load
	for tick := epoch; tick.Before(epoch.Add(5 * time.Second)); tick = tick.Add(cfg.TelemetryInterval) {
		ss := windows[tick]
		require.NotEmpty(t, ss, "arrivals every 110 ms land in every window")
		for _, s := range ss[1:] {
			for w := range s.loads {
				first, l := ss[0].loads[w], s.loads[w]
				assert.Equal(t, first.Running, l.Running, "running is frozen between ticks")
				assert.Equal(t, first.Waiting, l.Waiting)
				assert.Equal(t, first.KVUsage, l.KVUsage)
				inflightMoved = inflightMoved || first.Inflight != l.Inflight
			}
		}
		if prev != nil && (prev[0].Running != ss[0].loads[0].Running || prev[1].Running != ss[0].loads[1].Running) {
			sampleMoved = true
		}
		prev = ss[0].loads
	}
	assert.True(t, inflightMoved, "in-flight counts are live")
	assert.True(t, sampleMoved, "each tick brings new figures")

	for _, e := range f.pool.endpoints {
		reqs, tokens := f.router.Reserved(e.ID)
		assert.Zero(t, reqs, "every decision was released on %s", e.ID)
		assert.Zero(t, tokens)
		assert.Zero(t, e.Load.Inflight)
	}
}

func TestFleetRefusesMismatchedBlockSizes(t *testing.T) {
	wl := handWorkload(512, handRequest{prompt: 600, output: 1})
	_, err := newFleet(testFleetConfig(1, stepEngine()), wl, newPolicy(t, "random"))
	assert.ErrorContains(t, err, "blocks of 16 tokens, workload hashed in blocks of 512")
}
