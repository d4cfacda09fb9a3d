package routing

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIndexLongestPrefix(t *testing.T) {
	x := NewIndex(100, time.Minute)
	a := prompt(1, 2, 3, 4)
	b := prompt(1, 2, 9)
	x.Record(a, "wa", KindApproximate, epoch, 0)
	x.Record(b, "wb", KindApproximate, epoch, 0)

	matched, owners := x.Match(prompt(1, 2, 3, 4, 5), epoch, nil, nil)
	assert.Equal(t, 4, matched)
	require.Len(t, owners, 1)
	assert.Equal(t, "wa", owners[0].Worker)

	matched, owners = x.Match(prompt(1, 2, 7), epoch, nil, nil)
	assert.Equal(t, 2, matched, "the shared head")
	assert.ElementsMatch(t, []string{"wa", "wb"}, workerIDs(owners))

	matched, owners = x.Match(prompt(5), epoch, nil, nil)
	assert.Zero(t, matched)
	assert.Empty(t, owners)
	assert.Equal(t, 5, x.Len())
	assert.Equal(t, 4, x.WorkerBlocks("wa"))
}

func workerIDs(owners []Owner) []string {
	ids := make([]string, len(owners))
	for i, o := range owners {
		ids[i] = o.Worker
	}
	return ids
}

func TestIndexLRUEvictsPrefixTailsFirst(t *testing.T) {
	x := NewIndex(6, time.Hour)
	x.Record(prompt(1, 2, 3, 4), "w", KindApproximate, epoch, 0)
	x.Record(prompt(1, 2, 5, 6), "w", KindApproximate, epoch, 0) // shares the head: 6 blocks in all
	x.Record(prompt(7), "w", KindApproximate, epoch, 0)          // one more block: evict one
	assert.Equal(t, 6, x.Len())
	matched, _ := x.Match(prompt(1, 2, 5, 6), epoch, nil, nil)
	assert.Equal(t, 4, matched, "the most recent chain is whole")
	matched, _ = x.Match(prompt(1, 2, 3, 4), epoch, nil, nil)
	assert.Equal(t, 3, matched, "the older chain lost its tail, not its head")
}

func TestIndexProvisionalLapses(t *testing.T) {
	x := NewIndex(10, time.Hour)
	p := prompt(1, 2)
	x.Record(p, "w", KindProvisional, epoch, 5*time.Second)
	x.Record(p, "w", KindApproximate, epoch.Add(time.Second), 0)
	_, owners := x.Match(p, epoch.Add(2*time.Second), nil, nil)
	require.Len(t, owners, 1)
	assert.Equal(t, KindProvisional, owners[0].Kind, "an approximate refresh does not demote a provisional owner")
	_, owners = x.Match(p, epoch.Add(6*time.Second), nil, nil)
	assert.Equal(t, KindApproximate, owners[0].Kind)
}

func TestIndexSeedingOwnersAreInvisible(t *testing.T) {
	x := NewIndex(10, time.Hour)
	p := prompt(1, 2)
	x.Record(p, "seed", KindSeeding, epoch, 0)
	matched, owners := x.Match(p, epoch, nil, nil)
	assert.Zero(t, matched)
	assert.Empty(t, owners)
	x.Record(p, "w", KindApproximate, epoch, 0)
	_, owners = x.Match(p, epoch, nil, nil)
	assert.Equal(t, []string{"w"}, workerIDs(owners))
}

func TestIndexBoundsOwnersPerBlock(t *testing.T) {
	x := NewIndex(10, time.Hour)
	p := prompt(1)
	for i := range maxOwnersPerBlock + 2 {
		x.Record(p, fmt.Sprintf("w%d", i), KindApproximate, epoch.Add(time.Duration(i)*time.Second), 0)
	}
	_, owners := x.Match(p, epoch.Add(time.Minute), nil, nil)
	assert.Len(t, owners, maxOwnersPerBlock)
	assert.NotContains(t, workerIDs(owners), "w0", "the least recently used owner made room")
	assert.NotContains(t, workerIDs(owners), "w1")
}

func TestIndexWithdrawAndRemove(t *testing.T) {
	x := NewIndex(10, time.Hour)
	p := prompt(1, 2, 3)
	x.Record(p[:1], "a", KindApproximate, epoch, 0)
	st := x.Record(p, "a", KindApproximate, epoch, 0) // a held p[0] already
	x.Record(p, "b", KindApproximate, epoch, 0)
	x.Withdraw(p, st)
	matched, owners := x.Match(p, epoch, nil, nil)
	assert.Equal(t, 3, matched)
	assert.Equal(t, []string{"b"}, workerIDs(owners))
	x.RemoveWorker("b")
	matched, owners = x.Match(p, epoch, nil, nil)
	assert.Equal(t, 1, matched, "only a's first block is left")
	assert.Equal(t, []string{"a"}, workerIDs(owners))
	assert.Zero(t, x.WorkerBlocks("b"))
}

func TestIndexConcurrentUse(t *testing.T) {
	x := NewIndex(1000, time.Hour)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				p := prompt(uint64(i%50), uint64(g), uint64(i))
				x.Record(p, fmt.Sprintf("w%d", g), KindApproximate, epoch, 0)
				x.Match(p, epoch, nil, nil)
				if i%100 == 0 {
					x.RemoveWorker(fmt.Sprintf("w%d", (g+1)%8))
				}
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, x.Len(), 1000)
}

// benchFleet is 64 workers, a cache_aware router and an index filled to
// 1M blocks by 4-block prompts, as a busy gateway would hold.
func benchFleet(b *testing.B) (*Router, fixedPool) {
	cfg := DefaultPolicyConfig()
	policy := NewCacheAware(cfg, NewIndex(1<<20, time.Hour))
	pool := endpoints(64)
	for i := range pool {
		pool[i].Load = Load{Running: i % 7, MaxRunning: 64, KVUsage: 0.3, SampledAt: epoch, Complete: true}
	}
	for i := range 1 << 18 {
		policy.Index().Record(ChainIDs(uint64(i), []uint64{1, 2, 3, 4}, nil), pool[i%64].ID, KindApproximate, epoch, 0)
	}
	r := NewRouter(policy, Options{Clock: func() time.Time { return epoch }})
	return r, pool
}

// BenchmarkRouteCacheAware is one routing decision (hashing excluded: see
// BenchmarkBlockHasher) for a prompt of the given size in 256-byte blocks,
// rotating over 1,024 prompts so the index's blocks are not all in cache.
func BenchmarkRouteCacheAware(b *testing.B) {
	r, pool := benchFleet(b)
	for _, size := range []int{4 << 10, 128 << 10} {
		b.Run(fmt.Sprintf("prompt=%dKB", size>>10), func(b *testing.B) {
			ids := make([]uint64, size/256)
			for i := range ids {
				ids[i] = uint64(i)
			}
			reqs := make([]*Request, 1024)
			for i := range reqs {
				reqs[i] = &Request{Model: "m", PromptTokens: size / 4, Prefix: ChainIDs(uint64(1000+i), ids, nil)}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				d, err := r.Route(reqs[i%len(reqs)], pool)
				if err != nil {
					b.Fatal(err)
				}
				d.Done(OutcomeSuccess)
				i++
			}
		})
	}
}

// BenchmarkIndexMemory reports the index's heap per block.
func BenchmarkIndexMemory(b *testing.B) {
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		x := NewIndex(1<<20, time.Hour)
		for i := range 1 << 18 {
			x.Record(ChainIDs(uint64(i), []uint64{1, 2, 3, 4}, nil), fmt.Sprintf("w%d", i%64), KindApproximate, epoch, 0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(x.Len()), "bytes/block")
		runtime.KeepAlive(x)
	}
}

// BenchmarkIndexRecordDistinct records a new 4-block prompt per iteration,
// as a gateway serving distinct prompts does: the index grows to its bound
// and then evicts. Growth must not copy the slab (see chunkBits).
func BenchmarkIndexRecordDistinct(b *testing.B) {
	x := NewIndex(1<<20, time.Hour)
	ids := []uint64{1, 2, 3, 4}
	var buf []uint64
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		i++
		buf = ChainIDs(i, ids, buf[:0])
		x.Record(buf, "w", KindApproximate, epoch, 0)
	}
}
