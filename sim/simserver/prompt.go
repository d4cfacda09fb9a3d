package simserver

import (
	"github.com/zeebo/xxh3"
)

// promptTokens counts the tokens of a canonical prompt text: BytesPerToken
// bytes a token, rounded up, at least one (an engine always has a token to
// prefill).
func promptTokens(text []byte) int {
	return max(1, (len(text)+BytesPerToken-1)/BytesPerToken)
}

// blockHashes chains an xxh3 hash over each full block of blockTokens tokens
// (blockTokens×BytesPerToken bytes) of the text: h[i] = xxh3(block[i]) seeded
// by h[i-1], h[-1] = xxh3(model). The partial tail is not hashed: an engine
// caches only full blocks.
func blockHashes(text []byte, model string, blockTokens int) []uint64 {
	size := blockTokens * BytesPerToken
	n := len(text) / size
	if n == 0 {
		return nil
	}
	hs := make([]uint64, n)
	h := xxh3.HashString(model)
	for i := range hs {
		h = xxh3.HashSeed(text[i*size:(i+1)*size], h)
		hs[i] = h
	}
	return hs
}

// outputSeed fixes a request's output words from the seed and the prompt
// text only, so that any server instance answers the same bytes.
func outputSeed(seed uint64, text []byte) uint64 {
	return xxh3.HashSeed(text, seed)
}

// outputWord is token i of an output: one vocabulary word with its leading
// space, chosen by a splitmix64 mix of the output seed and the index.
func outputWord(base uint64, i int) string {
	x := base + uint64(i+1)*0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return vocabulary[x%uint64(len(vocabulary))]
}

// outputText is the whole output of n tokens.
func outputText(base uint64, n int) []byte {
	text := make([]byte, 0, n*8)
	for i := range n {
		text = append(text, outputWord(base, i)...)
	}
	return text
}

// vocabulary holds plain ASCII words that need no JSON escaping, so stream
// chunks can be written without an encoder.
var vocabulary = [...]string{
	" the", " cache", " prefix", " block", " token", " worker", " gateway", " route",
	" owner", " batch", " queue", " engine", " prompt", " request", " stream", " fair",
	" share", " spill", " seed", " lease", " proof", " credit", " tenant", " model",
	" load", " pressure", " headroom", " replica", " index", " hash", " chain", " event",
	" sample", " decode", " prefill", " step", " slot", " memory", " page", " hit",
	" miss", " warm", " cold", " fleet", " node", " rank", " shard", " policy",
	" and", " of", " to", " in", " is", " on", " for", " with",
	" a", " it", " as", " by", " at", " from", " that", " then",
}
