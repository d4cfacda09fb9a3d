package main

import (
	"cmp"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kvgate/kvgate/routing"
)

// Request is one arrival of a workload, as the fleet sees it.
type Request struct {
	At           time.Duration // since the start of the run
	PromptTokens int
	OutputTokens int
	// Prefix holds the chained hashes of the prompt's full blocks of
	// Workload.BlockTokens tokens: what the router routes on and what the
	// engine caches under. The turns of one conversation share a backing
	// array, so nobody may modify it.
	Prefix []uint64
	// Partition is the tenant that sent the request, one of
	// Workload.Partitions.
	Partition string
}

// Workload is what every policy replays.
type Workload struct {
	Name        string
	Model       string
	BlockTokens int
	Requests    []Request // in arrival order
	// Partitions are the tenants, in the admission scheduler's configuration
	// order.
	Partitions []partitionSpec
	// Admission is the gate the workload is meant to run behind.
	Admission admissionConfig
	// MaxCachedOwners, when positive, is the replication ceiling
	// (routing.max_cached_owners_per_prefix) the workload is meant to run
	// with, unless --max-cached-owners says otherwise.
	MaxCachedOwners int
}

// scaleTime divides every arrival time by scale (2 replays twice as fast).
func (w *Workload) scaleTime(scale float64) {
	if scale == 1 {
		return
	}
	for i := range w.Requests {
		w.Requests[i].At = time.Duration(float64(w.Requests[i].At) / scale)
	}
}

// source is an endless generated arrival process.
type source interface {
	// peek is when the next arrival comes.
	peek() time.Duration
	// pop returns the next arrival.
	pop() Request
}

// tagged is a source whose every arrival comes from one partition.
type tagged struct {
	source
	partition string
}

func (t tagged) pop() Request {
	r := t.source.pop()
	r.Partition = t.partition
	return r
}

// drain takes arrivals from src until it has n of them or they reach until
// (0: no time limit). Arrivals before time 0 are the generator's warm-up:
// they shape conversations but are not sent.
func drain(src source, n int, until time.Duration) []Request {
	out := make([]Request, 0, n)
	for len(out) < n && (until <= 0 || src.peek() < until) {
		r := src.pop()
		if r.At >= 0 {
			out = append(out, r)
		}
	}
	return out
}

// idSpace hands out block id ranges: every stream of text (a shared system
// prompt, one conversation) owns 2^32 ids, so equal ids mean equal text and
// distinct streams never collide.
type idSpace struct{ next uint64 }

func (s *idSpace) newRange() uint64 {
	s.next++
	return s.next << 32
}

// segment is a leading piece of text shared by several streams: a system
// prompt, an agent's tool definitions.
type segment struct {
	base   uint64 // block id range
	tokens int
}

// stream is a prompt that grows turn after turn: an optional shared segment,
// then text that is this stream's alone. Block k (tokens [k·bt, (k+1)·bt))
// gets the shared segment's id when the segment covers it entirely, else the
// stream's own id; its hash chains on every block before it.
type stream struct {
	bt     int
	shared segment
	own    uint64
	tokens int
	prev   uint64 // last chained hash, the model seed at first
	hashes []uint64
}

func newStream(model string, bt int, shared segment, ids *idSpace) *stream {
	return &stream{bt: bt, shared: shared, own: ids.newRange(), prev: routing.ModelSeed(model)}
}

// extend appends n tokens of text.
func (s *stream) extend(n int) {
	s.tokens += n
	var id [1]uint64
	for k := len(s.hashes); (k+1)*s.bt <= s.tokens; k++ {
		id[0] = s.own | uint64(k)
		if (k+1)*s.bt <= s.shared.tokens {
			id[0] = s.shared.base | uint64(k)
		}
		s.hashes = routing.ChainIDs(s.prev, id[:], s.hashes)
		s.prev = s.hashes[k]
	}
}

// request is an arrival carrying the stream's text so far as its prompt.
func (s *stream) request(at time.Duration, output int) Request {
	n := len(s.hashes)
	return Request{At: at, PromptTokens: s.tokens, OutputTokens: output, Prefix: s.hashes[:n:n]}
}

// span is an inclusive range drawn uniformly.
type span struct{ lo, hi int }

func (s span) draw(rng *rand.Rand) int { return s.lo + rng.IntN(s.hi-s.lo+1) }

func (s span) mean() float64 { return float64(s.lo+s.hi) / 2 }

// poisson is a Poisson arrival clock.
type poisson struct {
	rng  *rand.Rand
	rate float64 // arrivals a second
	t    time.Duration
}

func (p *poisson) advance() {
	p.t += time.Duration(p.rng.ExpFloat64() / p.rate * float64(time.Second))
}

// newRand is the random source of one generator: seed and a per-generator
// salt, so the generators of a blend draw independent streams.
func newRand(seed uint64, salt string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(salt))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// sortByArrival orders requests by arrival time, equal times in their
// original order.
func sortByArrival(reqs []Request) {
	slices.SortStableFunc(reqs, func(a, b Request) int { return cmp.Compare(a.At, b.At) })
}
