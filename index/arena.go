package index

// The tree's storage holds no Go pointers in bulk, so the garbage
// collector has almost nothing to trace in it. A full index is ~16 M
// nodes: as one heap object each, every GC cycle marked them one by one
// (2–4 s of a core at 16 M), the engine-name lookups' slots pointed at
// them (another ~21 M pointers), and a lookup that ran during the mark
// shared its CPU with it. Now nodes live in fixed chunks of a type with
// no pointers (the GC allocates such chunks unscanned), name each other
// by nodeRef, and keep holder sets of two or more in pooled arrays named
// by holderSet. What is still traced is per wide node, not per block:
// child maps and fans (kids, fans), and the chunk lists.
//
// A *node is still how code handles a node, for the length of a call:
// chunks never move or shrink, so a pointer into one stays valid.

// nodeRef names a node of its tree's arena; 0 names none. 32 bits name
// 4 G nodes, 240 GB of them: memory runs out first.
type nodeRef uint32

const (
	nodeChunkBits = 13
	nodeChunkLen  = 1 << nodeChunkBits // 8,192 nodes (448 KB) per chunk
)

// nodeArena allocates nodes. Freed nodes are reused before the arena
// grows. A tree returns its chunks only when it is emptied
// (Tree.resetStorage): its size is bounded by its fleet's cache capacity,
// which it reaches and then holds, so a tree that shrank for good keeps
// its peak's chunks until then (56 bytes per node of the peak).
type nodeArena struct {
	chunks []*[nodeChunkLen]node
	next   nodeRef // the next ref never handed out
	free   []nodeRef
}

func (a *nodeArena) at(r nodeRef) *node {
	return &a.chunks[r>>nodeChunkBits][r&(nodeChunkLen-1)]
}

// alloc returns an empty node with its own ref set.
func (a *nodeArena) alloc() *node {
	var r nodeRef
	if k := len(a.free); k > 0 {
		r = a.free[k-1]
		a.free = a.free[:k-1]
	} else {
		if a.next == 0 {
			a.next = 1 // ref 0 means none
		}
		r = a.next
		if int(r>>nodeChunkBits) == len(a.chunks) {
			a.chunks = append(a.chunks, new([nodeChunkLen]node))
		}
		a.next++
	}
	n := a.at(r)
	*n = node{self: r}
	return n
}

// release empties an unlinked node and keeps it for reuse.
func (a *nodeArena) release(n *node) {
	r := n.self
	*n = node{}
	a.free = append(a.free, r)
}

// holderSet names a holder array of a holderPool: its size class in the
// top byte (capacity 2<<class), its slot in the class below.
type holderSet uint64

const (
	holderSlotBits = 56
	// holderClasses covers every possible set: rank ids are 32-bit, and
	// class 31 holds 2^32 holders.
	holderClasses = 32
	// holderChunkLen is how many holders one chunk of a class holds (64 KB);
	// a class whose arrays are larger gets one array per chunk.
	holderChunkLen = 1 << 12
)

func holderCap(class uint32) int { return 2 << class }

// holderClassFor is the smallest class whose arrays hold n holders.
func holderClassFor(n int) uint32 {
	c := uint32(0)
	for holderCap(c) < n {
		c++
	}
	return c
}

// holderPool keeps the holder sets of nodes with two or more holders in
// chunks of pointer-free arrays, one size class per power of two.
type holderPool struct {
	classes [holderClasses]holderClass
}

type holderClass struct {
	chunks [][]holder
	next   uint64 // slots handed out
	free   []uint64
}

// slice returns set s's first n holders, capped at its capacity (an append
// past it cannot spill into the next set).
func (p *holderPool) slice(s holderSet, n int) []holder {
	class, slot := uint32(s>>holderSlotBits), uint64(s)&(1<<holderSlotBits-1)
	c := holderCap(class)
	per := max(holderChunkLen/c, 1)
	chunk := p.classes[class].chunks[slot/uint64(per)]
	off := int(slot%uint64(per)) * c
	return chunk[off : off+n : off+c]
}

// alloc returns a set of class class.
func (p *holderPool) alloc(class uint32) holderSet {
	hc := &p.classes[class]
	var slot uint64
	if k := len(hc.free); k > 0 {
		slot = hc.free[k-1]
		hc.free = hc.free[:k-1]
	} else {
		slot = hc.next
		c := holderCap(class)
		per := max(holderChunkLen/c, 1)
		if slot/uint64(per) == uint64(len(hc.chunks)) {
			hc.chunks = append(hc.chunks, make([]holder, per*c))
		}
		hc.next++
	}
	return holderSet(uint64(class)<<holderSlotBits | slot)
}

// release returns a set to its class.
func (p *holderPool) release(s holderSet) {
	class, slot := uint32(s>>holderSlotBits), uint64(s)&(1<<holderSlotBits-1)
	p.classes[class].free = append(p.classes[class].free, slot)
}

func setClass(s holderSet) uint32 { return uint32(s >> holderSlotBits) }

// slab keeps values a node names by a small number (1 + their index), so
// the node itself stays free of pointers.
type slab[T any] struct {
	items []T
	free  []uint32
}

func (s *slab[T]) add(v T) uint32 {
	if k := len(s.free); k > 0 {
		i := s.free[k-1]
		s.free = s.free[:k-1]
		s.items[i-1] = v
		return i
	}
	s.items = append(s.items, v)
	return uint32(len(s.items))
}

func (s *slab[T]) at(i uint32) T { return s.items[i-1] }

func (s *slab[T]) drop(i uint32) {
	var none T
	s.items[i-1] = none
	s.free = append(s.free, i)
}

// live is how many values are held.
func (s *slab[T]) live() int { return len(s.items) - len(s.free) }
