package sim

// blockCache is the prefix cache: KV blocks named by their chained hash, each
// either pinned by running requests (ref > 0) or evictable (ref == 0) and then
// on an LRU list. Entries live in a slab indexed by int32 with an intrusive
// doubly linked list, so that steady-state pin, unpin and eviction allocate
// nothing: fleetsim pushes millions of block operations through it.
type blockCache struct {
	index  map[uint64]int32
	blocks []cachedBlock
	free   []int32 // released slab slots, reused before the slab grows
	// lruHead is the least recently released evictable block, lruTail the
	// most recent; -1 when the list is empty.
	lruHead, lruTail int32
	evictable        int // blocks on the LRU list
	pinned           int // blocks with ref > 0
}

type cachedBlock struct {
	hash       uint64
	ref        int32
	prev, next int32 // LRU links, meaningful only while ref == 0
}

const noBlock int32 = -1

func newBlockCache(capacityBlocks int) blockCache {
	// Preallocate for an ordinary cache; a huge one grows on demand rather
	// than reserving memory it may never fill.
	hint := min(capacityBlocks, 1<<16)
	return blockCache{
		index:   make(map[uint64]int32, hint),
		blocks:  make([]cachedBlock, 0, hint),
		lruHead: noBlock,
		lruTail: noBlock,
	}
}

// len is the number of blocks the cache holds, pinned or evictable.
func (c *blockCache) len() int { return c.pinned + c.evictable }

func (c *blockCache) lookup(hash uint64) (int32, bool) {
	slot, ok := c.index[hash]
	return slot, ok
}

func (c *blockCache) isEvictable(slot int32) bool { return c.blocks[slot].ref == 0 }

// pin takes a reference on a cached block, taking it off the LRU list.
func (c *blockCache) pin(slot int32) {
	b := &c.blocks[slot]
	if b.ref == 0 {
		c.unlink(slot)
		c.evictable--
		c.pinned++
	}
	b.ref++
}

// unpin drops a reference; the last one makes the block the most recently
// used evictable block.
func (c *blockCache) unpin(slot int32) {
	b := &c.blocks[slot]
	b.ref--
	if b.ref == 0 {
		c.pinned--
		c.evictable++
		c.pushMRU(slot)
	}
}

// insertPinned adds a block that is not cached yet, pinned once. The caller
// has already accounted for its space.
func (c *blockCache) insertPinned(hash uint64) int32 {
	var slot int32
	if n := len(c.free); n > 0 {
		slot = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		slot = int32(len(c.blocks))
		c.blocks = append(c.blocks, cachedBlock{})
	}
	c.blocks[slot] = cachedBlock{hash: hash, ref: 1, prev: noBlock, next: noBlock}
	c.index[hash] = slot
	c.pinned++
	return slot
}

// evictLRU drops the least recently used evictable block; false when every
// cached block is pinned.
func (c *blockCache) evictLRU() bool {
	slot := c.lruHead
	if slot == noBlock {
		return false
	}
	c.unlink(slot)
	c.evictable--
	delete(c.index, c.blocks[slot].hash)
	c.free = append(c.free, slot)
	return true
}

func (c *blockCache) pushMRU(slot int32) {
	b := &c.blocks[slot]
	b.prev, b.next = c.lruTail, noBlock
	if c.lruTail != noBlock {
		c.blocks[c.lruTail].next = slot
	} else {
		c.lruHead = slot
	}
	c.lruTail = slot
}

func (c *blockCache) unlink(slot int32) {
	b := &c.blocks[slot]
	if b.prev != noBlock {
		c.blocks[b.prev].next = b.next
	} else {
		c.lruHead = b.next
	}
	if b.next != noBlock {
		c.blocks[b.next].prev = b.prev
	} else {
		c.lruTail = b.prev
	}
	b.prev, b.next = noBlock, noBlock
}
