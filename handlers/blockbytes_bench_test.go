package handlers

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvgate/kvgate/routing"
)

// BenchmarkBlockBytes is the per-request cost of prefix routing (routing
// text, block hashes, a cache_aware decision on 64 workers with a warm
// index) by block size and prompt size: the measurement behind the
// routing.block_bytes default (docs/routing.md).
func BenchmarkBlockBytes(b *testing.B) {
	for _, block := range []int{64, 128, 256, 512, 1024} {
		for _, size := range []int{4 << 10, 32 << 10, 128 << 10} {
			b.Run(fmt.Sprintf("block=%d/prompt=%dKB", block, size>>10), func(b *testing.B) {
				cfg := routing.DefaultPolicyConfig()
				router := routing.NewRouter(routing.NewCacheAware(cfg, routing.NewIndex(1<<20, time.Hour)),
					routing.Options{Clock: func() time.Time { return time.Unix(1e9, 0) }, Rand: rand.New(rand.NewPCG(1, 1))})
				pool := make(fixedEndpoints, 64)
				for i := range pool {
					pool[i] = routing.Endpoint{ID: fmt.Sprintf("w%d", i), Generation: 1, Revision: 1,
						Load: routing.Load{MaxRunning: 64, KVUsage: 0.3, Running: i % 9, SampledAt: time.Unix(1e9, 0), Complete: true}}
				}
				content := strings.Repeat("The quick brown fox jumps over the lazy dog. ", size/45)
				body := []byte(`{"model":"m","messages":[{"role":"system","content":"` + content + `"},{"role":"user","content":"hi"}]}`)
				h := routing.NewBlockHasher(block)
				req := &routing.Request{Model: "m", PromptTokens: size / 4}
				b.ReportAllocs()
				for b.Loop() {
					h.Reset("m")
					if err := writeRoutingText(h, body, endpointChat); err != nil {
						b.Fatal(err)
					}
					req.Prefix = h.Hashes()
					d, err := router.Route(req, pool)
					if err != nil {
						b.Fatal(err)
					}
					d.Done(routing.OutcomeSuccess)
				}
				b.ReportMetric(float64(len(h.Hashes())), "blocks/request")
			})
		}
	}
}

type fixedEndpoints []routing.Endpoint

func (p fixedEndpoints) Candidates(_ string, dst []routing.Endpoint) []routing.Endpoint {
	return append(dst, p...)
}
