package routing

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func hashText(model, text string, block int) []uint64 {
	h := NewBlockHasher(block)
	h.Reset(model)
	_, _ = h.WriteString(text)
	return append([]uint64(nil), h.Hashes()...)
}

func TestBlockHasherChains(t *testing.T) {
	a := hashText("m", strings.Repeat("a", 64)+strings.Repeat("b", 64)+"tail", 64)
	b := hashText("m", strings.Repeat("a", 64)+strings.Repeat("c", 64), 64)
	assert.Len(t, a, 2, "the partial tail is not hashed")
	assert.Equal(t, a[0], b[0], "equal first blocks, equal first hash")
	assert.NotEqual(t, a[1], b[1])
	assert.NotEqual(t, a[0], hashText("other", strings.Repeat("a", 64), 64)[0], "seeded by model")

	// The chain does not depend on how the text is cut into writes.
	h := NewBlockHasher(64)
	h.Reset("m")
	text := strings.Repeat("a", 64) + strings.Repeat("b", 64) + "tail"
	for i := 0; i < len(text); i += 7 {
		_, _ = h.Write([]byte(text[i:min(i+7, len(text))]))
	}
	assert.Equal(t, a, h.Hashes())
	h.Reset("m")
	for i := range len(text) {
		_ = h.WriteByte(text[i])
	}
	assert.Equal(t, a, h.Hashes())

	// Each hash covers the whole prefix: the same block after different
	// prefixes hashes differently.
	c := hashText("m", strings.Repeat("x", 64)+strings.Repeat("b", 64), 64)
	assert.NotEqual(t, a[1], c[1])
}

func TestChainIDs(t *testing.T) {
	a := ChainIDs(1, []uint64{10, 11, 12}, nil)
	b := ChainIDs(1, []uint64{10, 11, 99}, nil)
	c := ChainIDs(1, []uint64{7, 11, 12}, nil)
	assert.Equal(t, a[:2], b[:2])
	assert.NotEqual(t, a[2], b[2])
	assert.NotEqual(t, a[1], c[1], "equal id after a different prefix")
}

func BenchmarkBlockHasher(b *testing.B) {
	text := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2913)) // ~128 KB
	h := NewBlockHasher(256)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		h.Reset("m")
		_, _ = h.Write(text)
	}
}
