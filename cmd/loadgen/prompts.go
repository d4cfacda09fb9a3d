package main

import (
	"fmt"
	"slices"
)

// Prompt length is reckoned at this many characters a token: close to what
// BPE tokenizers give for English words, and the ratio the trace README uses.
const charsPerToken = 4

// workload is the set of requests a run may send. Request i always has the
// same prompt and max_tokens, whatever order arrivals take, so a seeded run
// sends the same bodies again.
type workload interface {
	// size is the number of requests the workload holds, or -1 when it is
	// unbounded (the synthetic generator).
	size() int
	// appendPrompt appends the prompt of request i to dst. The prompt is
	// JSON-string-safe by construction: it never needs escaping.
	appendPrompt(dst []byte, i int) []byte
	// maxTokens is the max_tokens of request i.
	maxTokens(i int) int
}

// vocabulary holds the words prompts are made of. Lowercase ASCII only: this
// is what makes every prompt JSON-safe. 64 entries, so 6 random bits pick one.
var vocabulary = [64]string{
	"the", "of", "and", "to", "in", "is", "was", "that", "for", "on",
	"are", "with", "as", "at", "be", "this", "have", "from", "or", "one",
	"had", "by", "word", "but", "not", "what", "all", "were", "we", "when",
	"your", "can", "said", "there", "use", "each", "which", "she", "do", "how",
	"their", "if", "will", "up", "other", "about", "out", "many", "then", "them",
	"these", "so", "some", "her", "would", "make", "like", "him", "into", "time",
	"has", "look", "two", "more",
}

// splitmix64 advances *s and returns the next output of the SplitMix64
// generator: tiny, fast, and with no state besides one word, which is all a
// text derived from a key needs.
func splitmix64(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// mixKey combines a domain, a seed and an index into one text key, so that
// prefix k, the unique part of request k and block id k never share text.
func mixKey(domain, seed, i uint64) uint64 {
	s := domain ^ seed*0x9e3779b97f4a7c15
	splitmix64(&s)
	s ^= i
	return splitmix64(&s)
}

// Key domains.
const (
	domainBlock  uint64 = 0x626c6f636b000000 // trace block ids
	domainPrefix uint64 = 0x7072656669780000 // synthetic shared prefixes
	domainUnique uint64 = 0x756e697175650000 // synthetic per-request text
	domainPick   uint64 = 0x7069636b00000000 // which prefix a request uses
)

// appendText appends exactly n bytes of words derived only from key. The text
// for (key, m) is a prefix of the text for (key, n) when m < n, which is what
// lets a truncated trace block stay a prefix of the full one.
func appendText(dst []byte, key uint64, n int) []byte {
	if n <= 0 {
		return dst
	}
	end := len(dst) + n
	dst = slices.Grow(dst, n+16) // a word may overshoot before the cut
	s := key
	for len(dst) < end {
		x := splitmix64(&s)
		for k := 0; k < 10 && len(dst) < end; k++ {
			dst = append(dst, vocabulary[x&63]...)
			dst = append(dst, ' ')
			x >>= 6
		}
	}
	return dst[:end]
}

// syntheticPrompts is the built-in generator: every prompt is one of K shared
// prefixes (modelling system prompts) followed by text unique to the request.
type syntheticPrompts struct {
	seed        uint64
	prefixes    [][]byte
	uniqueChars int
	tokens      int
}

var _ workload = (*syntheticPrompts)(nil)

// newSyntheticPrompts builds prompts of about promptTokens tokens, of which
// the first sharedTokens come from one of k prefixes.
func newSyntheticPrompts(seed uint64, promptTokens, sharedTokens, k, maxTokens int) (*syntheticPrompts, error) {
	switch {
	case promptTokens < 1:
		return nil, fmt.Errorf("--prompt-tokens must be at least 1, got %d", promptTokens)
	case sharedTokens < 0 || sharedTokens > promptTokens:
		return nil, fmt.Errorf("--shared-prefix-tokens must be within [0, --prompt-tokens=%d], got %d", promptTokens, sharedTokens)
	case k < 1:
		return nil, fmt.Errorf("--prefixes must be at least 1, got %d", k)
	case maxTokens < 1:
		return nil, fmt.Errorf("--max-tokens must be at least 1, got %d", maxTokens)
	}
	p := &syntheticPrompts{
		seed:        seed,
		uniqueChars: (promptTokens - sharedTokens) * charsPerToken,
		tokens:      maxTokens,
	}
	if sharedTokens > 0 {
		p.prefixes = make([][]byte, k)
		for j := range p.prefixes {
			p.prefixes[j] = appendText(nil, mixKey(domainPrefix, seed, uint64(j)), sharedTokens*charsPerToken)
		}
	}
	return p, nil
}

func (p *syntheticPrompts) size() int { return -1 }

func (p *syntheticPrompts) maxTokens(int) int { return p.tokens }

// prefixOf is the index of the shared prefix request i uses.
func (p *syntheticPrompts) prefixOf(i int) int {
	if len(p.prefixes) == 0 {
		return 0
	}
	return int(mixKey(domainPick, p.seed, uint64(i)) % uint64(len(p.prefixes)))
}

func (p *syntheticPrompts) appendPrompt(dst []byte, i int) []byte {
	if len(p.prefixes) > 0 {
		dst = append(dst, p.prefixes[p.prefixOf(i)]...)
	}
	return appendText(dst, mixKey(domainUnique, p.seed, uint64(i)), p.uniqueChars)
}
