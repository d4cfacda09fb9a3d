package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kvgate/kvgate/mooncake"
)

func readTestTrace(t *testing.T, limit int) []mooncake.Record {
	t.Helper()
	recs, err := mooncake.ReadFile(filepath.Join("testdata", "trace.jsonl"), limit)
	require.NoError(t, err)
	require.NotEmpty(t, recs)
	return recs
}

func TestTracePrompts(t *testing.T) {
	recs := readTestTrace(t, 0)
	w := &tracePrompts{recs: recs, defaultTokens: 9}
	prompts := make([][]byte, len(recs))
	for i := range recs {
		prompts[i] = w.appendPrompt(nil, i)
	}

	t.Run("length is input_length tokens", func(t *testing.T) {
		for i, r := range recs {
			assert.Len(t, prompts[i], r.InputLength*charsPerToken, "record %d", i)
			assert.True(t, jsonSafe(prompts[i]))
		}
	})
	t.Run("equal block ids give equal text", func(t *testing.T) {
		// Records 0, 2 and 4 start with blocks [0 1]; 1 and 5 with [3].
		assert.Equal(t, prompts[0][:2*blockChars], prompts[2][:2*blockChars])
		assert.Equal(t, prompts[0][:2*blockChars], prompts[4][:2*blockChars])
		assert.Equal(t, prompts[1][:blockChars], prompts[5][:blockChars])
		assert.NotEqual(t, prompts[0][2*blockChars:2*blockChars+64], prompts[2][2*blockChars:2*blockChars+64], "block 2 vs 5")
		assert.NotEqual(t, prompts[0][:64], prompts[1][:64], "block 0 vs 3")
	})
	t.Run("a block's text depends on its id alone", func(t *testing.T) {
		block0 := appendText(nil, blockKey(0), blockChars)
		assert.Equal(t, block0, prompts[0][:blockChars])
		again := &tracePrompts{recs: []mooncake.Record{{InputLength: 512, HashIDs: []uint64{0}}}}
		assert.Equal(t, block0, again.appendPrompt(nil, 0), "same id in another trace")
	})
	t.Run("last block is cut short", func(t *testing.T) {
		// Record 3: 10 tokens of block 6.
		assert.Equal(t, appendText(nil, blockKey(6), blockChars)[:40], prompts[3])
	})
	t.Run("max tokens from output_length", func(t *testing.T) {
		assert.Equal(t, 5, w.maxTokens(0))
		assert.Equal(t, 9, w.maxTokens(5), "output_length 0 falls back to --max-tokens")
	})
	assert.Equal(t, len(recs), w.size())
}

func FuzzParseTraceLine(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [0, 1, 2]}`))
	f.Add([]byte(`{"timestamp": 1e9, "input_length": 1, "hash_ids": [-1]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, line []byte) {
		recs, err := mooncake.Read(bytes.NewReader(line), 1)
		if err != nil || len(recs) != 1 {
			return
		}
		rec := recs[0]
		// Whatever parses must expand to exactly its length.
		if rec.InputLength > 1<<16 {
			return
		}
		w := &tracePrompts{recs: []mooncake.Record{rec}, defaultTokens: 1}
		if got := len(w.appendPrompt(nil, 0)); got != rec.InputLength*charsPerToken {
			t.Fatalf("prompt of %d chars for input_length %d", got, rec.InputLength)
		}
	})
}
