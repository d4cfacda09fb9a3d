package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBlockCacheEvictsLeastRecentlyReleasedFirst(t *testing.T) {
	c := newBlockCache(8)
	a, b, d := c.insertPinned(1), c.insertPinned(2), c.insertPinned(3)
	c.unpin(b)
	c.unpin(a)
	c.unpin(d)
	assert.Equal(t, 3, c.evictable)
	assert.Equal(t, 0, c.pinned)

	// Re-pinning a takes it off the list; releasing it makes it the most recent.
	c.pin(a)
	assert.Equal(t, 2, c.evictable)
	c.unpin(a)

	var order []uint64
	for {
		head := c.lruHead
		if !c.evictLRU() {
			break
		}
		order = append(order, c.blocks[head].hash)
	}
	assert.Equal(t, []uint64{2, 3, 1}, order)
	assert.Zero(t, c.len())
	_, ok := c.lookup(1)
	assert.False(t, ok, "an evicted block must leave the index")
}

func TestBlockCacheNeverEvictsPinned(t *testing.T) {
	c := newBlockCache(4)
	a := c.insertPinned(10)
	c.insertPinned(11)
	c.pin(a)
	c.unpin(a) // still pinned once
	assert.False(t, c.evictLRU())
	assert.Equal(t, 2, c.pinned)
}

func TestBlockCacheReusesSlots(t *testing.T) {
	c := newBlockCache(2)
	a := c.insertPinned(1)
	c.unpin(a)
	require.True(t, c.evictLRU())
	b := c.insertPinned(2)
	assert.Equal(t, a, b, "a freed slot is reused before the slab grows")
	assert.Len(t, c.blocks, 1)
}
