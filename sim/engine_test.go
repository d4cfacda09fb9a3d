package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCacheHitShortensPrefill(t *testing.T) {
	ms := time.Millisecond
	cases := []struct {
		name       string
		req        Request
		wantCached int
		wantTTFT   time.Duration
	}{
		{
			name:       "cold prefix prefills the whole prompt",
			req:        prompt(2, 9, 100, 1),
			wantCached: 0,
			wantTTFT:   100*ms + 11*ms,
		},
		{
			name: "warm prefix prefills only its last block",
			req:  prompt(2, 1, 100, 1),
			// The last prompt token is always computed, so one block stays uncached.
			wantCached: 99 * 16,
			wantTTFT:   1*ms + 11*ms,
		},
		{
			name:       "half the prefix warm prefills the other half",
			req:        Request{ID: 2, BlockHashes: append(chain(1, 50), chain(2, 100)[50:]...), PromptTokens: 1600, OutputTokens: 1},
			wantCached: 50 * 16,
			wantTTFT:   50*ms + 11*ms,
		},
		{
			name:       "only the prefix counts: a different first block is a miss",
			req:        Request{ID: 2, BlockHashes: append([]uint64{77}, chain(1, 100)[1:]...), PromptTokens: 1600, OutputTokens: 1},
			wantCached: 0,
			wantTTFT:   100*ms + 11*ms,
		},
		{
			name:       "a partial tail block is prefilled, every full block cached",
			req:        Request{ID: 2, BlockHashes: chain(1, 100), PromptTokens: 1608, OutputTokens: 1},
			wantCached: 1600,
			wantTTFT:   500*time.Microsecond + 11*ms,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, nil)
			cold := runAlone(t, e, prompt(1, 1, 100, 1))
			require.Equal(t, 111*ms, cold.At, "a cold prompt of 1600 tokens takes 100 ms of prefill and one decode step")

			start := e.Now()
			ev := runAlone(t, e, tc.req)
			assert.Equal(t, tc.wantCached, ev.CachedTokens)
			assert.Equal(t, tc.wantTTFT, ev.At-start)
		})
	}
}

func TestSameStepAdmissionSharesScheduledBlocks(t *testing.T) {
	e := newTestEngine(t, nil)
	require.NoError(t, e.Submit(0, prompt(1, 5, 4, 1))) // occupies the first step alone
	require.NoError(t, e.Submit(0, prompt(2, 7, 10, 1)))
	require.NoError(t, e.Submit(0, prompt(3, 7, 10, 1)))
	evs := drain(t, e)

	second, ok := find(evs, 3, EventFirstToken)
	require.True(t, ok)
	assert.Equal(t, 9*16, second.CachedTokens, "blocks scheduled earlier in the same step are cached, as in vLLM")
}

func TestLRUEvictionKeepsRecentlyUsedPrefix(t *testing.T) {
	// 12 blocks; each request is 4 prompt blocks and one output block.
	e := newTestEngine(t, func(c *Config) { c.KVCapacityTokens = 12 * 16 })
	req := func(id, family uint64) Request { return prompt(id, family, 4, 16) }

	runAlone(t, e, req(1, 'A'))
	runAlone(t, e, req(2, 'B'))
	runAlone(t, e, req(3, 'A')) // A is now more recent than B
	runAlone(t, e, req(4, 'C')) // evicts one block of B
	runAlone(t, e, req(5, 'D')) // evicts the rest of B, then A's tail
	snap := e.Snapshot()
	assert.Equal(t, 11, snap.KVCachedBlocks)

	a := runAlone(t, e, req(6, 'A'))
	assert.Equal(t, 3*16, a.CachedTokens, "the recently used prefix survives (its tail block went first)")
	b := runAlone(t, e, req(7, 'B'))
	assert.Zero(t, b.CachedTokens, "the least recently used prefix was evicted")
}

func TestFIFOOrder(t *testing.T) {
	t.Run("one slot serves requests in arrival order", func(t *testing.T) {
		e := newTestEngine(t, func(c *Config) { c.MaxRunning = 1 })
		for id := uint64(1); id <= 4; id++ {
			require.NoError(t, e.Submit(0, prompt(id, id, 2, 2)))
		}
		evs := drain(t, e)
		var order []uint64
		for _, ev := range evs {
			if ev.Kind == EventFirstToken {
				order = append(order, ev.ID)
			}
		}
		assert.Equal(t, []uint64{1, 2, 3, 4}, order)
	})

	t.Run("a head that does not fit in KV blocks the requests behind it", func(t *testing.T) {
		e := newTestEngine(t, func(c *Config) { c.KVCapacityTokens = 20 * 16 })
		require.NoError(t, e.Submit(0, prompt(1, 1, 10, 5*16))) // 15 blocks
		require.NoError(t, e.Submit(0, prompt(2, 2, 10, 16)))   // 11 blocks: waits
		require.NoError(t, e.Submit(0, prompt(3, 3, 1, 1)))     // 2 blocks: would fit, but is behind 2
		at, _ := e.NextEventTime()
		e.Advance(at, nil)
		snap := e.Snapshot()
		assert.Equal(t, 1, snap.Running)
		assert.Equal(t, 2, snap.Waiting)

		evs := drain(t, e)
		done1, _ := find(evs, 1, EventFinished)
		first2, _ := find(evs, 2, EventFirstToken)
		first3, _ := find(evs, 3, EventFirstToken)
		assert.Greater(t, first2.At, done1.At)
		assert.GreaterOrEqual(t, first3.At, first2.At)
	})
}

func TestSlotsLimit(t *testing.T) {
	for _, limit := range []int{1, 2, 5} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			e := newTestEngine(t, func(c *Config) { c.MaxRunning = limit })
			for id := uint64(1); id <= 8; id++ {
				require.NoError(t, e.Submit(0, prompt(id, id, 1, 20)))
			}
			peak := 0
			for {
				snap := e.Snapshot()
				require.LessOrEqual(t, snap.Running, limit)
				assert.Equal(t, 8, snap.Running+snap.Waiting+countDone(e, 8))
				peak = max(peak, snap.Running)
				at, ok := e.NextEventTime()
				if !ok {
					break
				}
				e.Advance(at, nil)
			}
			assert.Equal(t, limit, peak)
		})
	}
}

// countDone counts the requests among 1..n the engine no longer holds.
func countDone(e *Engine, n uint64) int {
	done := 0
	for id := uint64(1); id <= n; id++ {
		if _, ok := e.Request(id); !ok {
			done++
		}
	}
	return done
}

func TestDecodeStepGrowsWithBatch(t *testing.T) {
	for _, n := range []int{1, 4, 8} {
		t.Run(fmt.Sprintf("batch %d", n), func(t *testing.T) {
			e := newTestEngine(t, nil)
			for i := 1; i <= n; i++ {
				req := prompt(uint64(i), uint64(i), 1, 4)
				req.TokenEvents = true
				require.NoError(t, e.Submit(0, req))
			}
			evs := eventsOf(drain(t, e), uint64(n))
			require.GreaterOrEqual(t, len(evs), 2)
			require.Equal(t, EventFirstToken, evs[0].Kind)
			require.Equal(t, EventToken, evs[1].Kind)
			want := 10*time.Millisecond + time.Duration(n)*time.Millisecond
			assert.Equal(t, want, evs[1].At-evs[0].At, "a decode step of %d requests", n)
		})
	}
}

func TestChunkedPrefillInterleavesDecodes(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.PrefillChunkTokens = 256 })
	decoder := prompt(1, 1, 1, 20)
	decoder.TokenEvents = true
	require.NoError(t, e.Submit(0, decoder))
	at, _ := e.NextEventTime()
	e.Advance(at, nil) // the decoder has its first token
	start := e.Now()
	// 1024 tokens: four chunks, after the decode step already in progress.
	require.NoError(t, e.Submit(start, prompt(2, 2, 64, 1)))

	evs := drain(t, e)
	first, ok := find(evs, 2, EventFirstToken)
	require.True(t, ok)
	assert.Equal(t, 11*time.Millisecond+4*(16*time.Millisecond+12*time.Millisecond), first.At-start)
	tokensMeanwhile := 0
	for _, ev := range eventsOf(evs, 1) {
		if ev.Kind == EventToken && ev.At > start && ev.At <= first.At {
			tokensMeanwhile++
		}
	}
	assert.Equal(t, 5, tokensMeanwhile, "the decoder emits a token every step while the long prompt prefills")
}

func TestCancel(t *testing.T) {
	cases := []struct {
		name  string
		phase Phase
	}{
		{"while waiting", PhaseWaiting},
		{"while prefilling", PhasePrefilling},
		{"while decoding", PhaseDecoding},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// One slot and 16-token prefill chunks make every phase last.
			e := newTestEngine(t, func(c *Config) { c.MaxRunning = 1; c.PrefillChunkTokens = 16 })
			require.NoError(t, e.Submit(0, prompt(1, 1, 1, 3)))
			require.NoError(t, e.Submit(0, prompt(2, 2, 10, 5))) // the victim
			require.NoError(t, e.Submit(0, prompt(3, 3, 1, 2)))

			var evs []Event
			cancelledAt := time.Duration(-1)
			for {
				if info, ok := e.Request(2); ok && info.Phase == tc.phase && cancelledAt < 0 {
					require.True(t, e.Cancel(e.Now(), 2))
					cancelledAt = e.Now()
					assert.False(t, e.Cancel(e.Now(), 2), "a second cancel finds nothing")
				}
				at, ok := e.NextEventTime()
				if !ok {
					break
				}
				evs = e.Advance(at, evs)
			}
			require.GreaterOrEqual(t, cancelledAt, time.Duration(0), "the victim never reached %s", tc.phase)
			for _, ev := range eventsOf(evs, 2) {
				assert.LessOrEqual(t, ev.At, cancelledAt, "no event after the cancel")
				assert.NotEqual(t, EventFinished, ev.Kind)
			}
			_, ok := find(evs, 3, EventFinished)
			assert.True(t, ok, "the request behind the victim still runs")
			snap := e.Snapshot()
			assert.Zero(t, snap.Running+snap.Waiting)
			assert.Zero(t, snap.KVUsedBlocks, "the victim's blocks are released")
			assert.True(t, e.Idle())
		})
	}
	t.Run("unknown id", func(t *testing.T) {
		e := newTestEngine(t, nil)
		assert.False(t, e.Cancel(0, 42))
	})
}

func TestCancelOfBlockedHeadAdmitsTheNext(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.KVCapacityTokens = 20 * 16 })
	require.NoError(t, e.Submit(0, prompt(1, 1, 10, 5*16))) // 15 blocks, long
	require.NoError(t, e.Submit(0, prompt(2, 2, 10, 16)))   // cannot fit
	require.NoError(t, e.Submit(0, prompt(3, 3, 1, 1)))     // fits
	at, _ := e.NextEventTime()
	e.Advance(at, nil)
	require.True(t, e.Cancel(at, 2))
	evs := drain(t, e)
	first3, ok := find(evs, 3, EventFirstToken)
	require.True(t, ok)
	done1, _ := find(evs, 1, EventFinished)
	assert.Less(t, first3.At, done1.At, "the new head runs beside the long request instead of waiting for it")
}

func TestSubmitRejects(t *testing.T) {
	cases := []struct {
		name string
		req  Request
		want error
	}{
		{"no prompt", Request{ID: 9, PromptTokens: 0, OutputTokens: 1}, ErrInvalidRequest},
		{"no output", Request{ID: 9, PromptTokens: 1, OutputTokens: 0}, ErrInvalidRequest},
		{"duplicate id", Request{ID: 1, PromptTokens: 1, OutputTokens: 1}, ErrDuplicateID},
		{"larger than the cache", Request{ID: 9, PromptTokens: 16 * 1024, OutputTokens: 1}, ErrTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, nil)
			require.NoError(t, e.Submit(0, prompt(1, 1, 1, 100)))
			assert.ErrorIs(t, e.Submit(0, tc.req), tc.want)
		})
	}
}

func TestTelemetry(t *testing.T) {
	e := newTestEngine(t, func(c *Config) { c.MaxRunning = 1 })
	require.NoError(t, e.Submit(0, prompt(1, 1, 100, 2)))
	require.NoError(t, e.Submit(0, prompt(2, 1, 100, 2)))

	snap := e.Snapshot()
	assert.Equal(t, 1, snap.Running)
	assert.Equal(t, 1, snap.Waiting)
	assert.Equal(t, 1, snap.MaxRunning)
	assert.Equal(t, 1600, snap.WaitingPromptTokens)
	assert.Equal(t, 101, snap.KVUsedBlocks, "1600 prompt and 2 output tokens")
	assert.InDelta(t, 101.0/1024, snap.KVUsage, 1e-12)
	assert.Equal(t, uint64(1600), snap.PrefixCacheQueries)
	assert.Zero(t, snap.PrefixCacheHits)
	info, ok := e.Request(1)
	require.True(t, ok)
	assert.Equal(t, PhasePrefilling, info.Phase)

	drain(t, e)
	snap = e.Snapshot()
	assert.Equal(t, uint64(3200), snap.PrefixCacheQueries)
	assert.Equal(t, uint64(99*16), snap.PrefixCacheHits)
	assert.Zero(t, snap.KVUsage)
	assert.Equal(t, 100, snap.KVCachedBlocks, "prompt blocks stay cached after their requests end")
	assert.Zero(t, snap.WaitingPromptTokens)
}

func TestEventsOfOneRequest(t *testing.T) {
	cases := []struct {
		name        string
		output      int
		tokenEvents bool
		want        []EventKind
	}{
		{"one token", 1, true, []EventKind{EventFirstToken, EventFinished}},
		{"every token", 3, true, []EventKind{EventFirstToken, EventToken, EventToken, EventFinished}},
		{"first and last only", 3, false, []EventKind{EventFirstToken, EventFinished}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEngine(t, nil)
			req := prompt(1, 1, 2, tc.output)
			req.TokenEvents = tc.tokenEvents
			require.NoError(t, e.Submit(0, req))
			evs := drain(t, e)
			var kinds []EventKind
			for _, ev := range evs {
				kinds = append(kinds, ev.Kind)
			}
			assert.Equal(t, tc.want, kinds)
			last := evs[len(evs)-1]
			assert.Equal(t, tc.output, last.Tokens)
		})
	}
}

func TestDeterminism(t *testing.T) {
	for _, chunk := range []int{0, 256} {
		t.Run(fmt.Sprintf("chunk %d", chunk), func(t *testing.T) {
			a := replay(t, chunk, 7)
			b := replay(t, chunk, 7)
			require.NotEmpty(t, a)
			assert.Equal(t, a, b)
			assert.NotEqual(t, a, replay(t, chunk, 8), "a different workload gives different events")
		})
	}
}

// replay runs a seeded random workload of shared prefixes, arrivals and
// cancellations through a fresh engine and returns every event.
func replay(t *testing.T, chunk int, seed uint64) []Event {
	e := newTestEngine(t, func(c *Config) { c.PrefillChunkTokens = chunk; c.KVCapacityTokens = 256 * 16 })
	rng := rand.New(rand.NewPCG(seed, 1))
	var evs []Event
	now := time.Duration(0)
	for id := uint64(1); id <= 300; id++ {
		now += time.Duration(rng.IntN(40)) * time.Millisecond
		evs = e.Advance(now, evs)
		blocks := 1 + rng.IntN(60)
		req := prompt(id, uint64(rng.IntN(6)), blocks, 1+rng.IntN(30))
		req.PromptTokens += rng.IntN(16)
		req.TokenEvents = rng.IntN(2) == 0
		require.NoError(t, e.Submit(now, req))
		if rng.IntN(10) == 0 {
			e.Cancel(now, id-uint64(rng.IntN(5)))
		}
	}
	return append(evs, drain(t, e)...)
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"defaults", func(*Config) {}, true},
		{"no slots", func(c *Config) { c.MaxRunning = 0 }, false},
		{"no block size", func(c *Config) { c.BlockTokens = 0 }, false},
		{"cache smaller than a block", func(c *Config) { c.KVCapacityTokens = 8 }, false},
		{"no prefill speed", func(c *Config) { c.PrefillTokensPerSec = 0 }, false},
		{"negative decode", func(c *Config) { c.DecodeStepBase = -1 }, false},
		{"negative chunk", func(c *Config) { c.PrefillChunkTokens = -1 }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mutate(&cfg)
			err := cfg.Validate()
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}

func TestTimeNeverGoesBack(t *testing.T) {
	e := newTestEngine(t, nil)
	e.Advance(time.Second, nil)
	require.NoError(t, e.Submit(time.Millisecond, prompt(1, 1, 1, 1)))
	evs := drain(t, e)
	first, _ := find(evs, 1, EventFirstToken)
	assert.Equal(t, time.Second+12*time.Millisecond, first.At, "a submit in the past arrives now")
}
