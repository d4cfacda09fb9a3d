package main

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/routing"
)

func genWorkload(t *testing.T, name string, requests int) *Workload {
	t.Helper()
	wl, err := generate(generateParams{name: name, model: "m", blockTokens: 16, requests: requests, seed: 3})
	require.NoError(t, err)
	return wl
}

func TestGeneratedWorkloadsAreSane(t *testing.T) {
	for _, g := range workloads {
		t.Run(g.name, func(t *testing.T) {
			wl := genWorkload(t, g.name, 2000)
			require.Len(t, wl.Requests, 2000)
			assert.Equal(t, g.name, wl.Name)
			assert.True(t, slices.IsSortedFunc(wl.Requests, func(a, b Request) int { return int(a.At - b.At) }), "arrivals in order")
			assert.GreaterOrEqual(t, wl.Requests[0].At, time.Duration(0))
			for i, r := range wl.Requests {
				require.GreaterOrEqual(t, r.PromptTokens, 1, "request %d", i)
				require.GreaterOrEqual(t, r.OutputTokens, 1, "request %d", i)
				require.Len(t, r.Prefix, r.PromptTokens/16, "request %d: one hash per full block", i)
			}
			// The arrival rate is the workload's default from the start:
			// conversations are already under way at time 0.
			last := wl.Requests[len(wl.Requests)-1].At.Seconds()
			assert.InEpsilon(t, g.rate, float64(len(wl.Requests))/last, 0.15, "requests a second")
			// Some prefix is shared by two requests in every workload.
			assert.Greater(t, sharedFirstBlocks(wl), 0.5, "share of requests whose first block another request also has")
		})
	}
}

// sharedFirstBlocks is the share of requests whose first block hash occurs
// in another request too.
func sharedFirstBlocks(wl *Workload) float64 {
	count := map[uint64]int{}
	for _, r := range wl.Requests {
		if len(r.Prefix) > 0 {
			count[r.Prefix[0]]++
		}
	}
	shared := 0
	for _, r := range wl.Requests {
		if len(r.Prefix) > 0 && count[r.Prefix[0]] > 1 {
			shared++
		}
	}
	return float64(shared) / float64(len(wl.Requests))
}

func TestHotPrefixCarriesOneSystemPromptOnMostTraffic(t *testing.T) {
	wl := genWorkload(t, "hot-prefix", 4000)
	shape := defaultHotPrefixShape()
	systemBlocks := shape.systemTokens / 16
	var hot [][]uint64
	for _, r := range wl.Requests {
		if len(r.Prefix) > systemBlocks && r.PromptTokens >= shape.systemTokens+shape.suffix.lo {
			hot = append(hot, r.Prefix)
		}
	}
	assert.InDelta(t, shape.hotShare, float64(len(hot))/float64(len(wl.Requests)), 0.03)
	ref := hot[0][:systemBlocks]
	distinctSuffix := map[uint64]bool{}
	for _, p := range hot {
		require.Equal(t, ref, p[:systemBlocks], "every hot request shares the whole system prompt")
		distinctSuffix[p[len(p)-1]] = true
	}
	assert.Len(t, distinctSuffix, len(hot), "suffixes are distinct")
	assert.Greater(t, defaultHotPrefixRate*shape.hotShare*shape.output.mean(), 3000.0,
		"the hot prefix alone asks for more decode than one default engine gives (~3,600 tokens/s at a full batch)")
}

func TestConversationsExtendTheirOwnPrefix(t *testing.T) {
	for _, name := range []string{"chat-sessions", "agentic"} {
		t.Run(name, func(t *testing.T) {
			wl := genWorkload(t, name, 3000)
			// A later turn's prefix starts with an earlier request's whole
			// prefix, past any shared prompt. A chained hash names its whole
			// prefix, so comparing the hash at the earlier length suffices.
			extends := 0
			ends := map[uint64]int{} // last hash of a request's prefix → its length
			for _, r := range wl.Requests {
				for k := len(r.Prefix) - 1; k >= 0; k-- {
					if n, ok := ends[r.Prefix[k]]; ok && n == k+1 {
						extends++
						break
					}
				}
				if n := len(r.Prefix); n > 0 {
					ends[r.Prefix[n-1]] = n
				}
			}
			assert.Greater(t, float64(extends)/float64(len(wl.Requests)), 0.6, "most requests continue a conversation")
		})
	}
}

func TestStreamSharesOnlyFullyCoveredBlocks(t *testing.T) {
	ids := &idSpace{}
	system := segment{base: ids.newRange(), tokens: 40} // 2.5 blocks of 16
	a := newStream("m", 16, system, ids)
	b := newStream("m", 16, system, ids)
	a.extend(100)
	b.extend(70)
	require.Len(t, a.hashes, 6)
	require.Len(t, b.hashes, 4)
	assert.Equal(t, a.hashes[:2], b.hashes[:2], "blocks inside the shared prompt are shared")
	assert.NotEqual(t, a.hashes[2], b.hashes[2], "the block the shared prompt ends in is not")

	// Extending turn by turn gives the same chain as all at once, and an
	// earlier turn's prefix keeps its value.
	c := newStream("m", 16, system, &idSpace{next: 1})
	first := c.request(0, 1)
	c.extend(30)
	c.extend(70)
	assert.Empty(t, first.Prefix)
	d := newStream("m", 16, system, &idSpace{next: 1})
	d.extend(100)
	assert.Equal(t, d.hashes, c.hashes)
	turn := c.request(0, 1)
	c.extend(500)
	assert.Equal(t, d.hashes, turn.Prefix, "a request's prefix never changes after it is made")

	// The chain is routing's: seeded by the model, one id a block.
	want := routing.ChainIDs(routing.ModelSeed("m"), []uint64{system.base, system.base | 1}, nil)
	assert.Equal(t, want, a.hashes[:2])
}

func TestDrainStopsAtDurationAndCount(t *testing.T) {
	wl, err := generate(generateParams{name: "hot-prefix", model: "m", blockTokens: 16, requests: 100000, duration: 10 * time.Second, seed: 1})
	require.NoError(t, err)
	assert.InDelta(t, 10*defaultHotPrefixRate, len(wl.Requests), 100)
	assert.Less(t, wl.Requests[len(wl.Requests)-1].At, 10*time.Second)

	wl, err = generate(generateParams{name: "hot-prefix", model: "m", blockTokens: 16, requests: 50, rate: 5, seed: 1})
	require.NoError(t, err)
	assert.Len(t, wl.Requests, 50)
	assert.InDelta(t, 10, wl.Requests[49].At.Seconds(), 5, "--rate sets the arrival rate")
}

func TestTimeScaleCompressesArrivals(t *testing.T) {
	wl := genWorkload(t, "agentic", 100)
	at := wl.Requests[99].At
	wl.scaleTime(4)
	assert.Equal(t, time.Duration(float64(at)/4), wl.Requests[99].At)
}
