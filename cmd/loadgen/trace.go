package main

import (
	"github.com/kvgate/kvgate/mooncake"
)

// blockChars is the text one trace block expands to.
const blockChars = mooncake.BlockTokens * charsPerToken

// tracePrompts replays a trace's prompts: block id b always expands to the
// same blockChars of text, derived from b alone, so requests that share a
// block-id prefix in the trace share a text prefix on the wire, and a
// prefix cache sees the reuse the trace recorded.
type tracePrompts struct {
	recs          []mooncake.Record
	defaultTokens int
}

var _ workload = (*tracePrompts)(nil)

func (t *tracePrompts) size() int { return len(t.recs) }

// maxTokens is the trace's output_length, or the --max-tokens default for a
// record that has none.
func (t *tracePrompts) maxTokens(i int) int {
	if n := t.recs[i].OutputLength; n > 0 {
		return n
	}
	return t.defaultTokens
}

// appendPrompt appends input_length*charsPerToken characters: every block in
// full but the last, which is cut to make up the length.
func (t *tracePrompts) appendPrompt(dst []byte, i int) []byte {
	rec := &t.recs[i]
	remaining := rec.InputLength * charsPerToken
	for _, id := range rec.HashIDs {
		if remaining <= 0 {
			break
		}
		n := min(remaining, blockChars)
		dst = appendText(dst, blockKey(id), n)
		remaining -= n
	}
	return dst
}

func blockKey(id uint64) uint64 { return mixKey(domainBlock, 0, id) }
