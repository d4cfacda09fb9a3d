package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/sim"
)

// BenchmarkFleet replays 2,000 requests of a generated workload through one
// policy on 8 workers: the whole event loop, routing included. Allocations
// per op divided by 2,000 are the per-request cost.
func BenchmarkFleet(b *testing.B) {
	for _, w := range []string{"hot-prefix", "agentic"} {
		for _, policy := range []string{"round_robin", "least_load"} {
			b.Run(w+"/"+policy, func(b *testing.B) {
				wl, err := generate(generateParams{name: w, model: "m", blockTokens: sim.DefaultBlockTokens, requests: 2000, seed: 1})
				require.NoError(b, err)
				cfg := testFleetConfig(8, sim.DefaultConfig())
				b.ReportAllocs()
				for b.Loop() {
					f, err := newFleet(cfg, wl, newPolicy(b, policy))
					require.NoError(b, err)
					require.NoError(b, f.run(context.Background()))
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2000, "ns/request")
			})
		}
	}
}
