package routing

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// ModelSeed is the seed of a model's prefix hash chain: equal text under
// different models (or LoRA adapters) must not match, since their KV caches
// are distinct.
func ModelSeed(model string) uint64 { return xxh3.HashString(model) }

// CacheSeed is ModelSeed further salted by a request's cache_salt (vLLM's
// per-tenant cache isolation); an empty salt is the model's own seed.
func CacheSeed(model, salt string) uint64 {
	if salt == "" {
		return ModelSeed(model)
	}
	return xxh3.HashStringSeed(salt, ModelSeed(model))
}

// BlockHasher turns a stream of routing text into chained block hashes:
// h[i] = xxh3(h[i-1] ‖ block[i]), seeded by the model. h[i] identifies the
// whole prefix up to block i, so equal hashes at equal positions mean equal
// prefixes. The partial tail block is not hashed: a prefix that ends mid-block
// could not be reused by an engine either.
//
// A BlockHasher is reused across requests (Reset); in steady state it
// allocates nothing per block.
type BlockHasher struct {
	blockBytes int
	prev       uint64
	buf        []byte // blockBytes+8: the previous hash, then the block
	n          int    // bytes of the current block filled
	hashes     []uint64
}

// NewBlockHasher returns a hasher of blockBytes-byte blocks.
func NewBlockHasher(blockBytes int) *BlockHasher {
	return &BlockHasher{blockBytes: blockBytes, buf: make([]byte, 8+blockBytes)}
}

// Reset starts a new chain for model.
func (h *BlockHasher) Reset(model string) { h.ResetSeed(ModelSeed(model)) }

// ResetSeed starts a new chain from seed.
func (h *BlockHasher) ResetSeed(seed uint64) {
	h.prev = seed
	h.n = 0
	h.hashes = h.hashes[:0]
	binary.LittleEndian.PutUint64(h.buf, seed)
}

// Write feeds routing text; it never fails.
func (h *BlockHasher) Write(p []byte) (int, error) { return write(h, p), nil }

// WriteString feeds routing text.
func (h *BlockHasher) WriteString(s string) (int, error) { return write(h, s), nil }

// write copies text into the current block, hashing each block it fills.
func write[T string | []byte](h *BlockHasher, p T) int {
	total := len(p)
	for len(p) > 0 {
		c := copy(h.buf[8+h.n:], p)
		h.n += c
		p = p[c:]
		if h.n == h.blockBytes {
			h.endBlock()
		}
	}
	return total
}

// endBlock hashes the full current block into the chain.
func (h *BlockHasher) endBlock() {
	h.prev = xxh3.Hash(h.buf)
	h.hashes = append(h.hashes, h.prev)
	binary.LittleEndian.PutUint64(h.buf, h.prev)
	h.n = 0
}

// WriteByte feeds one byte of routing text.
func (h *BlockHasher) WriteByte(c byte) error {
	h.buf[8+h.n] = c
	h.n++
	if h.n == h.blockBytes {
		h.endBlock()
	}
	return nil
}

// Hashes returns the chain of full blocks so far. The slice is the hasher's
// and is overwritten after Reset: copy it to keep it.
func (h *BlockHasher) Hashes() []uint64 { return h.hashes }

// ChainIDs appends to dst the chained hashes of a sequence of block ids
// (a trace's hash_ids, an engine's token blocks): the same chain rule as
// BlockHasher, one id a block.
func ChainIDs(seed uint64, ids []uint64, dst []uint64) []uint64 {
	var buf [16]byte
	prev := seed
	for _, id := range ids {
		binary.LittleEndian.PutUint64(buf[:8], prev)
		binary.LittleEndian.PutUint64(buf[8:], id)
		prev = xxh3.Hash(buf[:])
		dst = append(dst, prev)
	}
	return dst
}
