package routing

import (
	"sync"
	"time"
)

// OwnerKind says how the index learned that a worker holds a block.
type OwnerKind uint8

const (
	// KindApproximate: kvgate routed a request with this prefix there. It
	// ages out (Index TTL, LRU under the memory bound).
	KindApproximate OwnerKind = iota + 1
	// KindProvisional: a pressure-spill destination, visible at once so that
	// concurrent spills coalesce on it; it lapses to approximate when its
	// spill cooldown ends.
	KindProvisional
	// KindAuthoritative: reported by the engine's KV events (not yet wired);
	// never pruned to enforce a replication ceiling.
	KindAuthoritative
	// KindSeeding: a distribution seed in flight, invisible to ordinary
	// routing until it commits (issue #4).
	KindSeeding
)

func (k OwnerKind) String() string {
	switch k {
	case KindApproximate:
		return "approximate"
	case KindProvisional:
		return "provisional"
	case KindAuthoritative:
		return "authoritative"
	case KindSeeding:
		return "seeding"
	}
	return "none"
}

// Owner is a worker that holds a matched prefix.
type Owner struct {
	Worker  string
	Kind    OwnerKind
	LastUse time.Time
}

// indexTick is the index's time resolution: last-use times and provisional
// deadlines are stored as 32-bit counts of ticks since the index's epoch
// (13 years of range), keeping an owner to 16 bytes with its slot,
// generation, stamp and kind.
const indexTick = 100 * time.Millisecond

// chunkBits sizes the slab's chunks (4096 entries of 112 bytes, about 460 KB): the index
// grows a chunk at a time and never moves an entry, so no insert pays for
// copying a large slice under the lock.
const chunkBits = 12

// maxOwnersPerBlock bounds an entry's owner list; a block already held by
// this many workers loses its least recently used owner to a new one. The
// replication ceiling keeps cache_aware well below it.
const maxOwnersPerBlock = 6

type blockOwner struct {
	slot    uint16 // worker slot + 1; 0 = empty
	gen     uint16 // the slot's generation when recorded: a removed worker's entries lapse at once
	stamp   uint16 // the Record call that last wrote it (low bits of Index.seq), for Withdraw
	kind    OwnerKind
	lastUse uint32 // ticks
	until   uint32 // provisional: ticks until which the kind holds
}

// stampHeld marks a record some Record call found already held: no
// Withdraw takes it back, whoever wrote it first (a Record's own stamps skip
// this value).
const stampHeld = 0

// Stamp is what one Record call did, so that a request that fails can take
// back exactly that (Withdraw): the worker's slot and incarnation, and the
// call's own mark on the records it wrote (the records it found the worker
// holding are marked stampHeld instead). The zero Stamp withdraws nothing.
type Stamp struct {
	slot uint16 // slot + 1; 0 = nothing recorded
	gen  uint16
	seq  uint16
}

// entry is one block: no pointers, so the slab is never scanned by the GC.
type entry struct {
	hash       uint64
	prev, next int32 // LRU list; -1 ends
	owners     [maxOwnersPerBlock]blockOwner
}

// Index maps block hashes to the workers that hold them. It is bounded
// (LRU over blocks), ages out approximate ownership (TTL), and is safe for
// concurrent use.
type Index struct {
	maxBlocks int
	ttl       uint32 // ticks
	epoch     time.Time

	mu         sync.Mutex
	slots      map[uint64]int32 // block hash → entry
	chunks     [][]entry        // the slab, in fixed chunks: growing never copies
	n          int32            // entries in use
	head, tail int32            // most and least recently used

	workers    []string // slot → worker id ("" = free)
	workerSlot map[string]uint16
	slotGen    []uint16 // slot → generation, bumped when its worker is removed
	seq        uint16   // Record calls, wrapping: the stamp of the records each writes
	blocks     []int    // slot → blocks owned, for policies that weigh a worker's cache size
	allow      []bool   // scratch: the slots Match may answer with
	// The last among of allowOnly and its slots (-1: none), reused while the
	// candidates and the slot table stay the same: a routing decision asks
	// for the same fleet nearly every time.
	allowFor   []string
	allowSlots []int32
	allowVer   uint64 // slotVer when they were taken
	slotVer    uint64 // bumped whenever a worker takes or leaves a slot
	// found holds the entries of the last Match's matched blocks, in order:
	// the Record that follows a Match for the same prefix (a routing
	// decision) finds its leading blocks there instead of in the map. An
	// entry is used only while it still holds that block's hash.
	found []int32
}

// NewIndex returns an index of at most maxBlocks blocks whose approximate
// ownership lapses after ttl unused. Its clock is anchored at its first use,
// so the gateway's wall clock and the fleet simulator's virtual clock both
// get the full 13-year range of 32-bit ticks.
func NewIndex(maxBlocks int, ttl time.Duration) *Index {
	if maxBlocks < 1 {
		maxBlocks = 1
	}
	return &Index{
		maxBlocks:  maxBlocks,
		ttl:        uint32(max(ttl/indexTick, 1)),
		slots:      make(map[uint64]int32, min(maxBlocks, 1<<16)),
		head:       -1,
		tail:       -1,
		workerSlot: map[string]uint16{},
	}
}

func (x *Index) tick(t time.Time) uint32 {
	if x.epoch.IsZero() {
		x.epoch = t.Add(-indexTick)
	}
	d := t.Sub(x.epoch)
	if d < 0 {
		return 0
	}
	return uint32(d / indexTick)
}

// Len is the number of blocks indexed.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.slots)
}

// WorkerBlocks is the number of blocks worker holds.
func (x *Index) WorkerBlocks(worker string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s, ok := x.workerSlot[worker]; ok {
		return x.blocks[s]
	}
	return 0
}

// current reports whether o belongs to its slot's present worker (and so
// is counted in blocks).
func (x *Index) current(o *blockOwner) bool {
	return o.slot != 0 && o.gen == x.slotGen[o.slot-1]
}

// valid reports whether o still counts at now.
func (x *Index) valid(o *blockOwner, now uint32) bool {
	if !x.current(o) {
		return false
	}
	switch o.kind {
	case KindApproximate, KindProvisional:
		return now-o.lastUse <= x.ttl || o.lastUse > now
	}
	return true
}

// Match finds the longest indexed prefix of prefix held by one of the
// workers in among (any worker when among is nil): the number of leading
// blocks such a worker holds, and those of them holding the deepest one
// (appended to dst). Owners outside among (unhealthy, excluded by a retry)
// neither deepen the match nor hide the replicas that can serve it. Seeding
// owners are never returned: a seed is invisible to ordinary routing until
// it commits.
func (x *Index) Match(prefix []uint64, now time.Time, among []string, dst []Owner) (matched int, owners []Owner) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.tick(now)
	x.allowOnly(among)
	deepest := int32(-1)
	x.found = x.found[:0]
	for i, h := range prefix {
		e, ok := x.slots[h]
		if !ok || !x.anyVisible(x.at(e), t) {
			break
		}
		x.found = append(x.found, e)
		deepest = e
		matched = i + 1
	}
	if deepest < 0 {
		return 0, dst
	}
	// Touch the matched chain deepest-first, so its shallow blocks end most
	// recent and LRU evicts prefixes from their tails.
	for i := matched - 1; i >= 0; i-- {
		x.touch(x.found[i])
	}
	e := x.at(deepest)
	for j := range e.owners {
		o := &e.owners[j]
		if !x.visible(o, t) {
			continue
		}
		kind := o.kind
		if kind == KindProvisional && t > o.until {
			kind = KindApproximate
		}
		dst = append(dst, Owner{Worker: x.workers[o.slot-1], Kind: kind, LastUse: x.epoch.Add(time.Duration(o.lastUse) * indexTick)})
	}
	return matched, dst
}

// allowOnly sets the scratch slot filter to the workers of among (all when nil).
func (x *Index) allowOnly(among []string) {
	if cap(x.allow) < len(x.workers) {
		x.allow = make([]bool, len(x.workers), cap(x.workers))
	}
	x.allow = x.allow[:len(x.workers)]
	for i := range x.allow {
		x.allow[i] = among == nil
	}
	if !x.sameAmong(among) {
		x.allowFor = append(x.allowFor[:0], among...)
		x.allowSlots = x.allowSlots[:0]
		for _, w := range among {
			s, ok := x.workerSlot[w]
			if !ok {
				x.allowSlots = append(x.allowSlots, -1)
				continue
			}
			x.allowSlots = append(x.allowSlots, int32(s))
		}
		x.allowVer = x.slotVer
	}
	for _, s := range x.allowSlots {
		if s >= 0 {
			x.allow[s] = true
		}
	}
}

// sameAmong reports whether among is the last allowOnly's, with the slot
// table unchanged since (comparing equal strings that share their bytes,
// as the pool's ids do, is a pointer comparison).
func (x *Index) sameAmong(among []string) bool {
	if x.allowVer != x.slotVer || len(among) != len(x.allowFor) || (among == nil) != (x.allowFor == nil) {
		return false
	}
	for i, w := range among {
		if w != x.allowFor[i] {
			return false
		}
	}
	return true
}

// visible reports whether o answers Match: valid, allowed, not a seed.
func (x *Index) visible(o *blockOwner, t uint32) bool {
	return x.valid(o, t) && o.kind != KindSeeding && x.allow[o.slot-1]
}

func (x *Index) anyVisible(e *entry, t uint32) bool {
	for j := range e.owners {
		if x.visible(&e.owners[j], t) {
			return true
		}
	}
	return false
}

// Record marks worker as an owner of every block of prefix. A provisional
// record holds its kind until now+hold; an approximate one refreshes the
// last use of an existing provisional owner without demoting it. A seeding
// record never hides ownership the worker already has: it only adds the
// blocks the worker lacks, and any visible kind later replaces it.
//
// The Stamp it returns lets the request that caused it withdraw what it
// added if the worker never computed it (Withdraw).
func (x *Index) Record(prefix []uint64, worker string, kind OwnerKind, now time.Time, hold time.Duration) Stamp {
	if len(prefix) == 0 {
		return Stamp{}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.recordLocked(prefix, x.slotFor(worker), kind, now, hold)
}

func (x *Index) recordLocked(prefix []uint64, slot uint16, kind OwnerKind, now time.Time, hold time.Duration) Stamp {
	t := x.tick(now)
	until := t + uint32(hold/indexTick)
	x.seq++
	if x.seq == stampHeld {
		x.seq++
	}
	for i := len(prefix) - 1; i >= 0; i-- { // deepest first: see Match
		var e int32
		if i < len(x.found) && x.at(x.found[i]).hash == prefix[i] {
			e = x.found[i] // an entry in use holding h is h's entry
			x.touch(e)
		} else {
			e = x.entryFor(prefix[i])
		}
		x.setOwner(x.at(e), slot, kind, t, until)
	}
	return Stamp{slot: slot + 1, gen: x.slotGen[slot], seq: x.seq}
}

// rank orders kinds for an existing record: a stronger word replaces a
// weaker one, never the reverse. A seed in flight is the weakest (the worker
// has not computed the blocks yet); the engine's own report the strongest.
func (k OwnerKind) rank() int {
	switch k {
	case KindApproximate:
		return 1
	case KindProvisional:
		return 2
	case KindAuthoritative:
		return 3
	}
	return 0
}

// setOwner records slot as an owner of e, stamped with the current Record
// call, or with stampHeld if slot held e, valid and visible, already.
func (x *Index) setOwner(e *entry, slot uint16, kind OwnerKind, t, until uint32) {
	free, oldest := -1, -1
	for j := range e.owners {
		o := &e.owners[j]
		if o.slot == slot+1 && x.current(o) {
			// A record the worker held already is no call's to take back;
			// one it did not (expired, or a seed's) is this call's.
			o.stamp = x.seq
			if x.valid(o, t) && o.kind != KindSeeding {
				o.stamp = stampHeld
			}
			o.lastUse = t
			switch {
			case o.kind == KindAuthoritative:
			case kind.rank() > o.kind.rank():
				o.kind, o.until = kind, until
			case kind == KindProvisional && o.kind == KindProvisional:
				o.until = max(o.until, until)
			}
			return
		}
		if !x.valid(o, t) {
			x.drop(o)
			if free < 0 {
				free = j
			}
		} else if o.kind != KindAuthoritative && (oldest < 0 || o.lastUse < e.owners[oldest].lastUse) {
			oldest = j
		}
	}
	if free < 0 {
		if oldest < 0 {
			return // every owner authoritative: the engine's word stands
		}
		x.drop(&e.owners[oldest])
		free = oldest
	}
	e.owners[free] = blockOwner{slot: slot + 1, gen: x.slotGen[slot], stamp: x.seq, kind: kind, lastUse: t, until: until}
	x.blocks[slot]++
}

// Withdraw takes back what the Record call that returned st added: the
// records of prefix that call wrote, unless another Record has
// written them since (a request that did reach the worker), and never an
// authoritative one. Records of an incarnation since removed are already
// gone.
func (x *Index) Withdraw(prefix []uint64, st Stamp) {
	if st.slot == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.slotGen[st.slot-1] != st.gen {
		return
	}
	for _, h := range prefix {
		e, ok := x.slots[h]
		if !ok {
			continue
		}
		en := x.at(e)
		for j := range en.owners {
			o := &en.owners[j]
			if o.slot == st.slot && o.gen == st.gen && o.stamp == st.seq && o.kind != KindAuthoritative {
				x.drop(o)
			}
		}
	}
}

// Commit records the worker of st as an approximate owner of prefix, as a
// seed's success does, if that worker's incarnation is still the one st was
// taken from: a worker removed or replaced meanwhile gets nothing.
func (x *Index) Commit(prefix []uint64, st Stamp, now time.Time) {
	if st.slot == 0 || len(prefix) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	slot := st.slot - 1
	if x.slotGen[slot] != st.gen || x.workers[slot] == "" {
		return
	}
	x.recordLocked(prefix, slot, KindApproximate, now, 0)
}

// drop empties an owner record, uncounting it if its worker is present.
func (x *Index) drop(o *blockOwner) {
	if x.current(o) {
		x.blocks[o.slot-1]--
	}
	*o = blockOwner{}
}

// RemoveWorker drops every block ownership of worker: it left the fleet, or
// came back as a new incarnation whose cache is empty. It is O(1): the
// worker's slot moves to a new generation, and records of the old one no
// longer count anywhere (they are reclaimed as their blocks are reused).
func (x *Index) RemoveWorker(worker string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	slot, ok := x.workerSlot[worker]
	if !ok {
		return
	}
	delete(x.workerSlot, worker)
	x.workers[slot] = ""
	x.slotVer++
	x.slotGen[slot]++
	x.blocks[slot] = 0
	if x.slotGen[slot] == 0 {
		x.sweepSlot(slot)
	}
}

// sweepSlot clears every record of slot, whatever its generation: when the
// slot's generation wraps, records of its oldest incarnations would count
// again. Once per 65,536 removals of one slot, O(blocks).
func (x *Index) sweepSlot(slot uint16) {
	for c := range x.chunks {
		for i := range x.chunks[c] {
			e := &x.chunks[c][i]
			for j := range e.owners {
				if e.owners[j].slot == slot+1 {
					e.owners[j] = blockOwner{}
				}
			}
		}
	}
}

func (x *Index) slotFor(worker string) uint16 {
	if s, ok := x.workerSlot[worker]; ok {
		return s
	}
	x.slotVer++
	for i, w := range x.workers {
		if w == "" {
			x.workers[i] = worker
			x.workerSlot[worker] = uint16(i)
			return uint16(i)
		}
	}
	x.workers = append(x.workers, worker)
	x.blocks = append(x.blocks, 0)
	x.slotGen = append(x.slotGen, 0)
	s := uint16(len(x.workers) - 1)
	x.workerSlot[worker] = s
	return s
}

// entryFor returns h's entry, inserting it (and evicting the least recently
// used block when full); the entry becomes the most recently used.
func (x *Index) entryFor(h uint64) int32 {
	if e, ok := x.slots[h]; ok {
		x.touch(e)
		return e
	}
	var e int32
	if int(x.n) < x.maxBlocks {
		e = x.n
		if int(e)>>chunkBits == len(x.chunks) {
			x.chunks = append(x.chunks, make([]entry, 1<<chunkBits))
		}
		x.n++
	} else {
		e = x.tail
		x.evict(e)
	}
	*x.at(e) = entry{hash: h, prev: -1, next: -1}
	x.slots[h] = e
	x.pushFront(e)
	return e
}

// at returns entry e of the slab.
func (x *Index) at(e int32) *entry { return &x.chunks[e>>chunkBits][e&(1<<chunkBits-1)] }

func (x *Index) evict(e int32) {
	old := x.at(e)
	for j := range old.owners {
		x.drop(&old.owners[j])
	}
	delete(x.slots, old.hash)
	x.unlink(e)
}

func (x *Index) touch(e int32) {
	if x.head == e {
		return
	}
	x.unlink(e)
	x.pushFront(e)
}

func (x *Index) unlink(e int32) {
	en := x.at(e)
	if en.prev >= 0 {
		x.at(en.prev).next = en.next
	} else if x.head == e {
		x.head = en.next
	}
	if en.next >= 0 {
		x.at(en.next).prev = en.prev
	} else if x.tail == e {
		x.tail = en.prev
	}
	en.prev, en.next = -1, -1
}

func (x *Index) pushFront(e int32) {
	en := x.at(e)
	en.prev, en.next = -1, x.head
	if x.head >= 0 {
		x.at(x.head).prev = e
	}
	x.head = e
	if x.tail < 0 {
		x.tail = e
	}
}
