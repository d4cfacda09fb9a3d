package routing

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// checkIndex verifies the index's internal invariants: the LRU list holds
// exactly the mapped entries, in consistent order; no entry has two current
// records of one worker; blocks[] counts each worker's current records.
func checkIndex(t *testing.T, x *Index) {
	t.Helper()
	if err := indexInvariants(x); err != nil {
		t.Fatal(err)
	}
}

func indexInvariants(x *Index) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.slots) > x.maxBlocks {
		return fmt.Errorf("%d blocks over the bound %d", len(x.slots), x.maxBlocks)
	}
	n, prev := 0, int32(-1)
	for e := x.head; e >= 0; e = x.at(e).next {
		if x.at(e).prev != prev {
			return fmt.Errorf("entry %d: prev %d, want %d", e, x.at(e).prev, prev)
		}
		if got, ok := x.slots[x.at(e).hash]; !ok || got != e {
			return fmt.Errorf("entry %d on the LRU list is not mapped", e)
		}
		prev = e
		if n++; n > len(x.slots) {
			return fmt.Errorf("LRU list longer than the map (%d)", len(x.slots))
		}
	}
	if prev != x.tail || n != len(x.slots) {
		return fmt.Errorf("LRU list: %d entries ending at %d, map %d, tail %d", n, prev, len(x.slots), x.tail)
	}
	count := make([]int, len(x.workers))
	for _, e := range x.slots {
		en := x.at(e)
		var seen [maxOwnersPerBlock]uint16
		for j := range en.owners {
			o := &en.owners[j]
			if !x.current(o) {
				continue
			}
			for _, s := range seen[:j] {
				if s == o.slot {
					return fmt.Errorf("block %x: two current records of slot %d", en.hash, o.slot-1)
				}
			}
			seen[j] = o.slot
			count[o.slot-1]++
		}
	}
	for s := range count {
		if count[s] != x.blocks[s] {
			return fmt.Errorf("slot %d (%q): %d current records, counted %d", s, x.workers[s], count[s], x.blocks[s])
		}
	}
	return nil
}

func TestIndexInvariantsUnderRandomOperations(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		x := NewIndex(64, 2*time.Second)
		now := epoch
		ws := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		type recorded struct {
			prefix []uint64
			st     Stamp
		}
		var stamps []recorded
		for step := range 3000 {
			now = now.Add(time.Duration(r.IntN(300)) * time.Millisecond)
			ids := make([]uint64, 1+r.IntN(12))
			for i := range ids {
				ids[i] = uint64(r.IntN(3))
			}
			p := ChainIDs(1, ids, nil)
			w := ws[r.IntN(len(ws))]
			switch r.IntN(11) {
			case 0, 1, 2:
				stamps = append(stamps, recorded{p, x.Record(p, w, KindApproximate, now, 0)})
			case 10:
				if len(stamps) > 0 {
					k := r.IntN(len(stamps))
					x.Withdraw(stamps[k].prefix, stamps[k].st)
					stamps = append(stamps[:k], stamps[k+1:]...)
				}
			case 3:
				x.Record(p, w, KindProvisional, now, time.Second)
			case 4:
				x.Record(p, w, KindSeeding, now, 0)
			case 5:
				x.Record(p[:1], w, KindAuthoritative, now, 0)
			case 6:
				x.Record(p, w, KindApproximate, now, 0) // a second request on the same prefix
			case 7:
				if r.IntN(10) == 0 {
					x.RemoveWorker(w)
				}
			default:
				x.Match(p, now, nil, nil)
			}
			if err := indexInvariants(x); err != nil {
				t.Fatalf("seed %d, step %d: %v", seed, step, err)
			}
		}
	}
}

type lockedPool struct {
	mu sync.Mutex
	ep []Endpoint
}

func (p *lockedPool) Candidates(_ string, dst []Endpoint) []Endpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append(dst, p.ep...)
}

func TestConcurrentRoutingBalancesEveryPolicy(t *testing.T) {
	for _, name := range []string{"cache_aware", SeedingVariant, "sglang_cache_aware", "prefix_hash", "least_load"} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultPolicyConfig()
			pol, err := NewPolicy(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var cmu sync.Mutex
			now := epoch
			clock := func() time.Time { cmu.Lock(); defer cmu.Unlock(); now = now.Add(time.Millisecond); return now }
			r := NewRouter(pol, Options{Clock: clock, Rand: rand.New(rand.NewPCG(1, 2))})
			pool := &lockedPool{ep: endpoints(6)}
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rr := rand.New(rand.NewPCG(uint64(g), 9))
					for range 1500 {
						// telemetry moves, generations bump, a worker leaves and returns
						pool.mu.Lock()
						i := rr.IntN(len(pool.ep))
						pool.ep[i].Load = Load{Running: rr.IntN(12), Waiting: rr.IntN(3), MaxRunning: 10, KVUsage: rr.Float64(), SampledAt: clock(), Complete: rr.IntN(5) > 0}
						if rr.IntN(50) == 0 {
							pool.ep[i].Generation++
						}
						pool.mu.Unlock()
						if rr.IntN(200) == 0 {
							r.RemoveWorker(pool.ep[i].ID)
						}
						ids := []uint64{uint64(rr.IntN(3)), uint64(rr.IntN(3)), uint64(rr.IntN(4)), uint64(rr.IntN(50))}
						req := &Request{Model: "m", PromptTokens: rr.IntN(2000), MaxTokens: rr.IntN(300), Prefix: ChainIDs(1, ids[:1+rr.IntN(4)], nil),
							Partition: "p", SingleTarget: true, Proof: &oneShot{}}
						if rr.IntN(5) == 0 {
							req.Exclude = []string{pool.ep[rr.IntN(6)].ID}
						}
						d, err := r.Route(req, pool)
						if err != nil {
							continue
						}
						o := Outcome(rr.IntN(3))
						if rr.IntN(2) == 0 {
							d.Done(o)
							d.Done(o)
						} else {
							wg.Add(1)
							go func() { defer wg.Done(); d.Done(o) }()
						}
					}
				}()
			}
			wg.Wait()
			for _, e := range pool.ep {
				n, tok := r.Reserved(e.ID)
				assert.Zero(t, n, e.ID)
				assert.Zero(t, tok, e.ID)
			}
			if ca, ok := pol.(*CacheAware); ok {
				assert.Zero(t, ca.SeedsInFlight("p"))
				for k, p := range ca.spills.byPrefix {
					assert.NotEqual(t, SeedInFlight, p.state, "prefix %x stuck in seed_in_flight", k)
				}
			}
			if ix, ok := pol.(Indexed); ok {
				checkIndex(t, ix.Index())
			}
			r.mu.Lock()
			for id, rw := range r.reserved {
				assert.GreaterOrEqual(t, rw.reqs, 0, id)
				assert.GreaterOrEqual(t, rw.tokens, 0, id)
			}
			r.mu.Unlock()
		})
	}
}
