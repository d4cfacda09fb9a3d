package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// jsonSafe reports whether b can sit inside a JSON string unescaped.
func jsonSafe(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

func TestAppendText(t *testing.T) {
	t.Run("exact length", func(t *testing.T) {
		for _, n := range []int{0, 1, 3, 4, 5, 100, blockChars, 3*blockChars + 7} {
			assert.Len(t, appendText(nil, 42, n), n)
		}
	})
	t.Run("appends after existing bytes", func(t *testing.T) {
		got := appendText([]byte("head"), 42, 10)
		assert.Equal(t, "head", string(got[:4]))
		assert.Equal(t, appendText(nil, 42, 10), got[4:])
	})
	t.Run("deterministic in the key", func(t *testing.T) {
		assert.Equal(t, appendText(nil, 7, 500), appendText(nil, 7, 500))
		assert.NotEqual(t, appendText(nil, 7, 500), appendText(nil, 8, 500))
	})
	t.Run("shorter text is a prefix of longer", func(t *testing.T) {
		long := appendText(nil, 99, blockChars)
		for _, n := range []int{1, 10, 777, blockChars - 1} {
			assert.Equal(t, long[:n], appendText(nil, 99, n))
		}
	})
	t.Run("JSON-safe words", func(t *testing.T) {
		text := appendText(nil, 1, 10000)
		assert.True(t, jsonSafe(text))
		assert.Greater(t, bytes.Count(text, []byte(" ")), 10000/8, "words, not one long token")
	})
}

func TestSyntheticPrompts(t *testing.T) {
	const promptTokens, shared, k = 100, 60, 3
	p, err := newSyntheticPrompts(5, promptTokens, shared, k, 16)
	require.NoError(t, err)
	const sharedChars = shared * charsPerToken

	t.Run("length", func(t *testing.T) {
		for i := range 20 {
			assert.Len(t, p.appendPrompt(nil, i), promptTokens*charsPerToken)
		}
	})
	t.Run("requests on one prefix share exactly that prefix", func(t *testing.T) {
		seen := map[int][]byte{}
		for i := range 50 {
			prompt := p.appendPrompt(nil, i)
			j := p.prefixOf(i)
			if first, ok := seen[j]; ok {
				assert.Equal(t, first[:sharedChars], prompt[:sharedChars])
				assert.NotEqual(t, first[sharedChars:], prompt[sharedChars:], "the rest is unique to the request")
			} else {
				seen[j] = prompt
			}
		}
		assert.Len(t, seen, k, "all prefixes in use")
		assert.NotEqual(t, seen[0][:sharedChars], seen[1][:sharedChars])
	})
	t.Run("deterministic with the seed", func(t *testing.T) {
		again, err := newSyntheticPrompts(5, promptTokens, shared, k, 16)
		require.NoError(t, err)
		other, err := newSyntheticPrompts(6, promptTokens, shared, k, 16)
		require.NoError(t, err)
		assert.Equal(t, p.appendPrompt(nil, 3), again.appendPrompt(nil, 3))
		assert.NotEqual(t, p.appendPrompt(nil, 3), other.appendPrompt(nil, 3))
	})
	t.Run("no shared prefix", func(t *testing.T) {
		q, err := newSyntheticPrompts(5, 10, 0, 4, 16)
		require.NoError(t, err)
		a, b := q.appendPrompt(nil, 0), q.appendPrompt(nil, 1)
		assert.Len(t, a, 40)
		assert.NotEqual(t, a[:8], b[:8])
	})
	t.Run("all shared", func(t *testing.T) {
		q, err := newSyntheticPrompts(5, 10, 10, 1, 16)
		require.NoError(t, err)
		assert.Equal(t, q.appendPrompt(nil, 0), q.appendPrompt(nil, 1))
	})
	assert.Equal(t, -1, p.size())
	assert.Equal(t, 16, p.maxTokens(123))
}

func TestSyntheticPromptsRejects(t *testing.T) {
	tests := []struct {
		name                         string
		prompt, shared, k, maxTokens int
	}{
		{"empty prompt", 0, 0, 1, 1},
		{"negative prefix", 10, -1, 1, 1},
		{"prefix longer than prompt", 10, 11, 1, 1},
		{"no prefixes", 10, 5, 0, 1},
		{"no output", 10, 5, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newSyntheticPrompts(1, tt.prompt, tt.shared, tt.k, tt.maxTokens)
			assert.Error(t, err)
		})
	}
}

func BenchmarkSyntheticPrompt(b *testing.B) {
	p, err := newSyntheticPrompts(1, 1024, 768, 8, 32)
	require.NoError(b, err)
	buf := make([]byte, 0, 8<<10)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		buf = p.appendPrompt(buf[:0], i)
		i++
	}
}
