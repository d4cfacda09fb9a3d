package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testConfig is a small, round-numbered engine: 1 ms per 16 prefill tokens,
// 10 ms + 1 ms per request decode steps, 16-token blocks.
func testConfig() Config {
	return Config{
		MaxRunning:           8,
		KVCapacityTokens:     16 * 1024,
		BlockTokens:          16,
		PrefillTokensPerSec:  16000,
		DecodeStepBase:       10 * time.Millisecond,
		DecodeStepPerRequest: time.Millisecond,
	}
}

func newTestEngine(t testing.TB, mutate func(*Config)) *Engine {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := New(cfg)
	require.NoError(t, err)
	return e
}

// chain returns n block hashes of a prompt family: prompts of the same family
// share their prefix, as chained hashes of equal text do.
func chain(family uint64, n int) []uint64 {
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = family<<32 | uint64(i)
	}
	return hs
}

// prompt builds a request whose prompt is exactly blocks full blocks.
func prompt(id uint64, family uint64, blocks, output int) Request {
	return Request{ID: id, BlockHashes: chain(family, blocks), PromptTokens: blocks * 16, OutputTokens: output}
}

// drain advances the engine until it is idle and returns every event.
func drain(t testing.TB, e *Engine) []Event {
	t.Helper()
	var evs []Event
	for i := 0; ; i++ {
		require.Less(t, i, 1_000_000, "engine never went idle")
		at, ok := e.NextEventTime()
		if !ok {
			return evs
		}
		evs = e.Advance(at, evs)
	}
}

// runAlone submits req at the engine's current time, drains it, and returns
// its first-token event.
func runAlone(t testing.TB, e *Engine, req Request) Event {
	t.Helper()
	require.NoError(t, e.Submit(e.Now(), req))
	evs := drain(t, e)
	ev, ok := find(evs, req.ID, EventFirstToken)
	require.True(t, ok, "request %d has no first token", req.ID)
	return ev
}

func find(evs []Event, id uint64, kind EventKind) (Event, bool) {
	for _, ev := range evs {
		if ev.ID == id && ev.Kind == kind {
			return ev, true
		}
	}
	return Event{}, false
}

func eventsOf(evs []Event, id uint64) []Event {
	var out []Event
	for _, ev := range evs {
		if ev.ID == id {
			out = append(out, ev)
		}
	}
	return out
}
