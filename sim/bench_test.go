package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkStep64 is one step of a full batch of 64 decoding requests: the
// inner loop of both enginesim and fleetsim. It must not allocate. A request
// that finishes is replaced at once, so every step runs a full batch.
func BenchmarkStep64(b *testing.B) {
	for _, tokenEvents := range []bool{false, true} {
		b.Run(fmt.Sprintf("token_events=%v", tokenEvents), func(b *testing.B) {
			e := newTestEngine(b, func(c *Config) { c.MaxRunning = 64; c.KVCapacityTokens = 1 << 22 })
			hashes := chain(1, 8)
			id := uint64(0)
			submit := func() {
				id++
				req := Request{ID: id, BlockHashes: hashes, PromptTokens: 128, OutputTokens: 4096, TokenEvents: tokenEvents}
				if err := e.Submit(e.Now(), req); err != nil {
					b.Fatal(err)
				}
			}
			for range 64 {
				submit()
			}
			evs := make([]Event, 0, 256)
			for range 3 { // admit everything
				at, _ := e.NextEventTime()
				evs = e.Advance(at, evs[:0])
			}
			if e.Snapshot().Running != 64 {
				b.Fatal("batch not full")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				at, _ := e.NextEventTime()
				evs = e.Advance(at, evs[:0])
				for _, ev := range evs {
					if ev.Kind == EventFinished {
						submit()
					}
				}
			}
		})
	}
}

// BenchmarkRequestLifecycle submits a 15k-token prompt whose prefix is warm,
// runs it to its end and releases it: the per-request cost, allocation free
// once the engine is warm.
func BenchmarkRequestLifecycle(b *testing.B) {
	e := newTestEngine(b, func(c *Config) { c.KVCapacityTokens = DefaultKVCapacityTokens })
	hashes := chain(1, 15000/16)
	evs := make([]Event, 0, 16)
	id := uint64(0)
	run := func() {
		id++
		if err := e.Submit(e.Now(), Request{ID: id, BlockHashes: hashes, PromptTokens: 15000, OutputTokens: 4}); err != nil {
			b.Fatal(err)
		}
		for {
			at, ok := e.NextEventTime()
			if !ok {
				return
			}
			evs = e.Advance(at, evs[:0])
		}
	}
	run()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		run()
	}
}

// BenchmarkTraceLikeWorkload replays 500 requests shaped like the Mooncake
// trace (mean prompt 15k tokens in 16-token blocks, about 150 output tokens,
// shared prefixes) through one engine in virtual time, as fleetsim will.
func BenchmarkTraceLikeWorkload(b *testing.B) {
	type arrival struct {
		at  time.Duration
		req Request
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var work []arrival
	at := time.Duration(0)
	for id := uint64(1); id <= 500; id++ {
		at += time.Duration(rng.ExpFloat64() * float64(2*time.Second))
		tokens := 2000 + rng.IntN(26000)
		family := uint64(rng.IntN(20))
		work = append(work, arrival{at, Request{
			ID: id, BlockHashes: chain(family, tokens/16), PromptTokens: tokens, OutputTokens: 50 + rng.IntN(200),
		}})
	}
	b.ReportAllocs()
	for b.Loop() {
		e := newTestEngine(b, func(c *Config) { *c = DefaultConfig() })
		evs := make([]Event, 0, 64)
		for _, a := range work {
			for {
				next, ok := e.NextEventTime()
				if !ok || next > a.at {
					break
				}
				evs = e.Advance(next, evs[:0])
			}
			if err := e.Submit(a.at, a.req); err != nil {
				b.Fatal(err)
			}
		}
		for {
			next, ok := e.NextEventTime()
			if !ok {
				break
			}
			evs = e.Advance(next, evs[:0])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(work)), "ns/request")
}
