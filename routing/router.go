package routing

import (
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Request is what routing knows of a request.
type Request struct {
	Model        string
	PromptTokens int // estimated
	MaxTokens    int // requested output tokens; 0 when the client set none
	// Choices is how many completions the request generates (n, or best_of
	// when larger); 0 counts as 1. Each may produce MaxTokens.
	Choices int
	Stream  bool
	// Prefix is the chain of block hashes of the request's prompt
	// (BlockHasher, ChainIDs); empty when unknown. The router keeps it until
	// the decision is Done.
	Prefix []uint64
	// Exclude lists workers this request must not go to (failed attempts).
	Exclude []string

	// Partition is the request's admission partition (tenant).
	Partition string
	// SingleTarget: the request goes to one worker and asks for one
	// completion (no fan-out, n = 1). Only such non-streaming requests may
	// seed a clean worker.
	SingleTarget bool
	// Proof is the request's admission proof, nil without one. Distribution
	// seeding claims it (once, atomically) before any routing or lease
	// mutation: a request without a claimable proof never seeds.
	Proof Proof
}

// Proof is a one-shot admission proof (admission.Proof satisfies it).
type Proof interface {
	Claim() error
}

// ErrNoWorker means no worker can take the request now.
var ErrNoWorker = errors.New("no routable worker")

// Outcome is how a routed request ended.
type Outcome int

const (
	// OutcomeSuccess: the worker served the request.
	OutcomeSuccess Outcome = iota
	// OutcomeFailure: the worker failed it (connect error, 5xx, broken stream).
	OutcomeFailure
	// OutcomeCancelled: the client went away, or the attempt was abandoned
	// before it reached the worker.
	OutcomeCancelled
)

// Clock is the time source routing runs on.
type Clock func() time.Time

// Options configure a Router.
type Options struct {
	// MaxAge is the age beyond which telemetry is stale.
	MaxAge time.Duration
	// OutputEstimateCap bounds the output tokens a request reserves.
	OutputEstimateCap int
	Clock             Clock
	// Rand is the policies' random source; seeded for determinism in tests
	// and the fleet simulator. Used only under the router's lock.
	Rand *rand.Rand
}

// Router applies one Policy and owns the reservations.
type Router struct {
	policy Policy
	opts   Options

	mu       sync.Mutex
	reserved map[string]*reservedWork
	byPos    []*reservedWork // reservedAt's memory: the record of the i-th candidate last time
	buf      []Endpoint
	cands    []Candidate
	scratch  Scratch
}

// NewRouter returns a Router running policy.
func NewRouter(policy Policy, opts Options) *Router {
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Rand == nil {
		opts.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if opts.OutputEstimateCap <= 0 {
		opts.OutputEstimateCap = 1024
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = 5 * time.Second
	}
	return &Router{policy: policy, opts: opts, reserved: map[string]*reservedWork{}}
}

// Policy is the router's policy.
func (r *Router) Policy() Policy { return r.policy }

// Decision is a routed request's binding to a worker. Done must be called
// once the request ends; later calls do nothing.
type Decision struct {
	Worker Endpoint
	Label  Label
	// MatchedBlocks is how many of the request's prefix blocks the policy
	// found cached (prefix-aware policies only).
	MatchedBlocks int

	router   *Router
	res      reservation
	prefix   []uint64 // what the decision recorded of prefix (stamp) is withdrawn unless the request succeeds
	stamp    Stamp
	lease    *SeedLease
	spill    uint64 // the prefix of a pressure spill (spilling)
	spilling bool
	done     atomic.Bool
	settled  atomic.Bool
}

// Seed reports whether the decision is a distribution seed.
func (d *Decision) Seed() bool { return d.lease != nil }

// Done releases the decision's reservation exactly once. A request that did
// not succeed leaves no ownership behind: the worker never computed the
// blocks this decision recorded for it.
func (d *Decision) Done(o Outcome) {
	if d == nil || !d.done.CompareAndSwap(false, true) {
		return
	}
	d.router.release(d.res)
	if d.lease != nil {
		r := d.router
		r.mu.Lock()
		r.policy.(seedEnder).endSeed(d.lease, o, r.opts.Clock())
		r.mu.Unlock()
		return
	}
	d.Settle(o)
}

// Settle applies what the request's outcome means for ownership, once,
// without releasing the reservation: a request that did not succeed
// withdraws the ownership its decision recorded and gives a spilled prefix
// its expansion back. Done settles too; a caller that keeps the reservation
// past the outcome (a retry not yet routed) settles first, so the retry's
// decision sees the prefix as it now is. A seed settles only in Done.
func (d *Decision) Settle(o Outcome) {
	if d == nil || d.lease != nil || !d.settled.CompareAndSwap(false, true) {
		return
	}
	if o != OutcomeSuccess && d.prefix != nil {
		if ix, ok := d.router.policy.(Indexed); ok {
			ix.Index().Withdraw(d.prefix, d.stamp)
		}
	}
	if o != OutcomeSuccess && d.spilling {
		r := d.router
		r.mu.Lock()
		r.policy.(spillEnder).spillFailed(d.spill, d.Worker.ID, r.opts.Clock())
		r.mu.Unlock()
	}
}

// maxChoicesEstimate bounds the completions one request is charged for;
// engines refuse far fewer, and the product must not overflow.
const maxChoicesEstimate = 1024

// EstimatedWork is the tokens a request reserves: its prompt (shared by all
// its completions) and the output each completion may generate, capped so
// that one huge max_tokens does not blind the router for the whole request.
func (r *Router) EstimatedWork(req *Request) int {
	out := req.MaxTokens
	if out <= 0 || out > r.opts.OutputEstimateCap {
		out = r.opts.OutputEstimateCap
	}
	return max(req.PromptTokens, 0) + out*min(max(req.Choices, 1), maxChoicesEstimate)
}

// Route picks a worker for req among pool's candidates and reserves the
// request's work on it, in one critical section.
func (r *Router) Route(req *Request, pool Pool) (*Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.opts.Clock()
	r.buf = pool.Candidates(req.Model, r.buf[:0])
	r.cands = r.cands[:0]
	for i, e := range r.buf {
		if slices.Contains(req.Exclude, e.ID) {
			continue
		}
		rw := r.reservedAt(i, e)
		r.cands = append(r.cands, Candidate{
			Endpoint:       e,
			Fresh:          e.Load.Fresh(now, r.opts.MaxAge),
			ReservedReqs:   rw.reqs,
			ReservedTokens: rw.tokens,
			InflightReqs:   max(e.Load.Inflight, rw.outstandingReqs),
			InflightTokens: rw.outstandingTokens,
		})
	}
	if len(r.cands) == 0 {
		return nil, ErrNoWorker
	}
	work := r.EstimatedWork(req)
	r.scratch = Scratch{Rand: r.opts.Rand, Now: now, Work: work}
	i, label := r.policy.Select(req, r.cands, &r.scratch)
	if i < 0 || i >= len(r.cands) {
		return nil, ErrNoWorker
	}
	chosen := r.cands[i].Endpoint
	d := &Decision{Worker: chosen, Label: label, MatchedBlocks: r.scratch.Matched, router: r}
	if r.scratch.Stamp.slot != 0 {
		d.prefix, d.stamp = req.Prefix, r.scratch.Stamp
	}
	d.lease = r.scratch.Lease
	d.spill, d.spilling = r.scratch.Spill, r.scratch.Spilling
	d.res = r.reserveLocked(chosen, work)
	return d, nil
}

// Reserved returns the outstanding reservations on a worker (for status and tests).
func (r *Router) Reserved(id string) (reqs, tokens int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rw, ok := r.reserved[id]; ok {
		return rw.outstandingReqs, rw.outstandingTokens
	}
	return 0, 0
}

// ReservedSince is how many requests this gateway dispatched to a worker
// that a telemetry sample taken at sampledAt cannot include: 0 when the
// sample is newer than every reservation on record.
func (r *Router) ReservedSince(id string, sampledAt time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	rw, ok := r.reserved[id]
	if !ok {
		return 0
	}
	if sampledAt.After(rw.sampledAt) {
		return 0 // the router has not seen this sample yet: it counts them all
	}
	return rw.reqs
}

// RemoveWorker drops a removed worker's reservation bookkeeping and, for a
// prefix-aware policy, its prefix ownership.
func (r *Router) RemoveWorker(id string) {
	r.mu.Lock()
	delete(r.reserved, id)
	clear(r.byPos) // a re-added worker must get the new record
	r.mu.Unlock()
	r.dropOwnership(id)
}

// dropOwnership forgets what the policy's index says a worker holds.
func (r *Router) dropOwnership(id string) {
	if ix, ok := r.policy.(Indexed); ok {
		ix.Index().RemoveWorker(id)
	}
}
