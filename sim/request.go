package sim

import (
	"errors"
	"time"
)

// Request is one generation request as the engine sees it: the caller has
// already turned the prompt into a token count and block hashes.
type Request struct {
	// ID names the request in events and in Cancel; unique among the
	// requests the engine holds.
	ID uint64
	// BlockHashes are the chained hashes of the prompt's consecutive full
	// blocks of Config.BlockTokens tokens, first block first: equal hashes at
	// equal positions mean an equal prefix. Hashes past the prompt's last full
	// block are ignored. The engine keeps the slice until the request ends;
	// the caller must not modify it meanwhile.
	BlockHashes []uint64
	// PromptTokens is the prompt length, at least 1.
	PromptTokens int
	// OutputTokens is exactly how many tokens the request generates, at least 1.
	OutputTokens int
	// TokenEvents asks for an EventToken for every token after the first.
	// Without it the request reports only EventFirstToken and EventFinished,
	// which is all fleetsim needs and saves an event per token.
	TokenEvents bool
}

// Errors Submit returns.
var (
	ErrInvalidRequest = errors.New("sim: invalid request")
	ErrDuplicateID    = errors.New("sim: request id already in the engine")
	// ErrTooLarge: prompt and output need more KV blocks than the whole cache
	// holds, so the request could never be admitted and would block the FIFO
	// queue forever. Engines reject such a request up front (vLLM: 400, the
	// context is too long).
	ErrTooLarge = errors.New("sim: request needs more KV blocks than the cache holds")
)

// EventKind says what happened to a request.
type EventKind uint8

const (
	// EventFirstToken: the request's prefill finished and its first token is out.
	EventFirstToken EventKind = iota + 1
	// EventToken: one more token (only for requests with TokenEvents).
	EventToken
	// EventFinished: the last token is out and the request left the engine.
	// It follows the last token's own event at the same time.
	EventFinished
)

func (k EventKind) String() string {
	switch k {
	case EventFirstToken:
		return "first_token"
	case EventToken:
		return "token"
	case EventFinished:
		return "finished"
	default:
		return "unknown"
	}
}

// Event is something a request did at a time on the engine's clock.
type Event struct {
	At   time.Duration
	ID   uint64
	Kind EventKind
	// Tokens is how many tokens the request has generated, this one included
	// (1 for EventFirstToken, OutputTokens for EventFinished).
	Tokens int
	// CachedTokens is the prompt prefix the request found in the cache at
	// admission.
	CachedTokens int
}

// Phase is where a request is inside the engine.
type Phase uint8

const (
	PhaseWaiting Phase = iota + 1
	PhasePrefilling
	PhaseDecoding
)

func (p Phase) String() string {
	switch p {
	case PhaseWaiting:
		return "waiting"
	case PhasePrefilling:
		return "prefilling"
	case PhaseDecoding:
		return "decoding"
	default:
		return "unknown"
	}
}

// request is the engine's record of a Request. Records are recycled when a
// request ends so that steady state allocates nothing.
type request struct {
	Request
	phase Phase
	// slots are the cache blocks this request pins, in prompt block order:
	// first its cached prefix, then its own prompt blocks as their prefill is
	// scheduled.
	slots []int32
	// private is how many blocks the request holds outside the cache: its
	// prompt blocks not yet scheduled, its partial tail and its output.
	private      int
	cachedTokens int
	// computed is the prompt tokens cached or scheduled for prefill so far.
	computed  int
	generated int
}

// hashableBlocks is how many of the request's hashes name full prompt blocks.
func (r *request) hashableBlocks(blockTokens int) int {
	return min(len(r.BlockHashes), r.PromptTokens/blockTokens)
}
