package index

import (
	"fmt"

	"github.com/kvrouter/kvrouter/kv"
)

// Tree is the radix tree of one storage tier. It is not safe for
// concurrent use: a shard owns it and serialises access.
type Tree struct {
	root    *node // in the arena; never removed
	arena   nodeArena
	sets    holderPool                          // holder arrays of nodes held twice or more
	kids    slab[map[kv.LocalBlockHash]nodeRef] // child maps of nodes with two or more children
	fans    slab[map[uint32]*[]nodeRef]         // fans of wide nodes (fan.go)
	ranks   []rankState
	ids     map[kv.WorkerWithDpRank]uint32
	workers map[kv.WorkerID][]uint32 // rank ids of each worker, for RemoveWorker
	free    []uint32
	entries int // (rank, block) entries, i.e. the sum of lookup sizes
	nodes   int // nodes excluding the root

	counters Counters

	// A node gets a fan at fanBuild (>= 2) children and loses it at
	// fanDrop (fan.go); tests lower both so small trees exercise fans.
	fanBuild, fanDrop int

	// onDrop, when set, learns of every entry that leaves the tree for any
	// reason; approximate mode uses it to forget the entry's TTL.
	onDrop func(id uint32, ext kv.ExternalBlockHash)

	// order answers matches in rank order without sorting (ordered.go).
	order rankOrder

	// scratch buffers reused across calls to keep Apply allocation-free
	stack   []*node
	doomed  []*node
	targets []*node
	refs    []nodeRef // emptyRank's list of a rank's nodes
	// targetNames[i] is the engine name targets[i] was found by.
	targetNames []kv.ExternalBlockHash
	names       nameFilter // checkSelfReference's screen of a long event
	seen        blockMap   // its exact set of names, when the screen fails
	// touched keeps what blockMap.touch reads (see there), so the loads
	// stay in the program.
	touched uint64
}

// NewTree returns an empty tree.
func NewTree() *Tree {
	t := &Tree{
		ids:      make(map[kv.WorkerWithDpRank]uint32),
		workers:  make(map[kv.WorkerID][]uint32),
		fanBuild: defaultFanBuild,
		fanDrop:  defaultFanDrop,
	}
	t.root = t.arena.alloc()
	return t
}

// Counters returns a copy of the running totals.
func (t *Tree) Counters() Counters { return t.counters }

// CounterMap returns the counters keyed by snake_case name.
func (t *Tree) CounterMap() map[string]uint64 { return t.counters.Map() }

// Len is the number of (rank, block) entries indexed.
func (t *Tree) Len() int { return t.entries }

// Nodes is the number of distinct blocks (tree nodes) indexed.
func (t *Tree) Nodes() int { return t.nodes }

// WorkerBlockCounts returns how many blocks every known rank holds,
// including ranks emptied by a Cleared event.
func (t *Tree) WorkerBlockCounts() map[kv.WorkerWithDpRank]uint64 {
	out := make(map[kv.WorkerWithDpRank]uint64, len(t.ids))
	for r, id := range t.ids {
		out[r] = uint64(t.ranks[id].blocks.len())
	}
	return out
}

// Apply applies one KV event. Errors wrap one of the package's sentinels;
// whatever the input, the tree stays consistent.
func (t *Tree) Apply(ev *kv.Event) error {
	if ev == nil {
		t.counters.InvalidEvent++
		return fmt.Errorf("nil event: %w", ErrInvalidEvent)
	}
	if err := ev.Validate(); err != nil {
		t.counters.InvalidEvent++
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	var err error
	switch ev.Kind {
	case kv.EventStored:
		err = t.applyStored(ev)
	case kv.EventRemoved:
		err = t.applyRemoved(ev)
	case kv.EventCleared:
		t.counters.Cleared++
		t.counters.ClearedBlocks += uint64(t.clearRank(ev.Worker))
	}
	if err == nil {
		t.counters.EventsApplied++
	}
	return err
}

func (t *Tree) applyStored(ev *kv.Event) error {
	if err := t.checkSelfReference(ev); err != nil {
		t.counters.InvalidSequence++
		return err
	}
	parent := t.root
	var id uint32
	if ev.HasParent {
		pid, known := t.ids[ev.Worker]
		var p *node
		if known {
			p = t.lookup(pid, ev.ParentHash)
		}
		if p == nil {
			t.counters.ParentNotFound++
			return fmt.Errorf("stored event %d from %s: parent %d: %w",
				ev.EventID, ev.Worker, ev.ParentHash, ErrParentNotFound)
		}
		parent, id = p, pid
	} else {
		id = t.internRank(ev.Worker)
	}
	t.touchAll(&t.ranks[id].blocks, ev)
	for i, b := range ev.Blocks {
		next, err := t.storeBlock(parent, id, b)
		if err != nil {
			t.counters.InvalidSequence++
			return fmt.Errorf("stored event %d from %s, block %d (hash %d): %w",
				ev.EventID, ev.Worker, i, b.BlockHash, err)
		}
		parent = next
	}
	return nil
}

// checkSelfReference rejects a chain that names one engine hash twice, or
// its parent's hash again: applying it would make a block its own ancestor.
func (t *Tree) checkSelfReference(ev *kv.Event) error {
	blocks := ev.Blocks
	bad := func(h kv.ExternalBlockHash) error {
		return fmt.Errorf("stored event %d from %s repeats engine hash %d: %w",
			ev.EventID, ev.Worker, h, ErrInvalidBlockSequence)
	}
	if ev.HasParent {
		for _, b := range blocks {
			if b.BlockHash == ev.ParentHash {
				return bad(b.BlockHash)
			}
		}
	}
	if len(blocks) <= pairwiseNames {
		if h, ok := repeatedName(blocks, storedName); ok {
			return bad(h)
		}
		return nil
	}
	// Past that only names that share a bit of the filter can repeat.
	names := t.names.sharingNames(blocks)
	if len(names) <= pairwiseNames {
		if h, ok := repeatedName(names, sameName); ok {
			return bad(h)
		}
		return nil
	}
	seen := &t.seen
	defer seen.reset()
	for _, h := range names {
		if seen.get(h) != 0 {
			return bad(h)
		}
		seen.put(h, t.root.self) // any node: the set only needs a key
	}
	return nil
}

// pairwiseNames is how many names checkSelfReference compares pair by
// pair; past it, a set is cheaper.
const pairwiseNames = 32

// repeatedName returns a name two of xs carry, comparing every pair.
func repeatedName[T any](xs []T, name func(T) kv.ExternalBlockHash) (kv.ExternalBlockHash, bool) {
	for i := 1; i < len(xs); i++ {
		for j := 0; j < i; j++ {
			if name(xs[i]) == name(xs[j]) {
				return name(xs[i]), true
			}
		}
	}
	return 0, false
}

func storedName(b kv.StoredBlock) kv.ExternalBlockHash     { return b.BlockHash }
func sameName(h kv.ExternalBlockHash) kv.ExternalBlockHash { return h }

// storeBlock records that rank id holds block b under parent, and returns
// the block's node. The parent is the root or a node id holds.
func (t *Tree) storeBlock(parent *node, id uint32, b kv.StoredBlock) (*node, error) {
	rs := &t.ranks[id]
	child := t.childOf(parent, b.TokensHash)
	named := t.node(rs.blocks.get(b.BlockHash))
	if named != nil && named == child {
		t.counters.DuplicateStore++
		return child, nil
	}
	if named != nil {
		// The engine reuses a name we attribute to another block. Moving it
		// must not pull the parent chain out from under us.
		if t.isAncestorOrSelf(named, parent) {
			return nil, ErrInvalidBlockSequence
		}
		dropped := t.dropSubtree(named, id)
		t.counters.Moved++
		t.counters.CascadeRemoved += uint64(dropped - 1)
	}
	if child == nil {
		child = t.arena.alloc()
		child.hash = b.TokensHash
		t.addChild(parent, child)
		if t.wantsFan(parent) {
			t.buildFan(parent)
		}
		t.nodes++
	}
	at, held := t.find(child, id)
	if held {
		// Same content under the same parent, new engine name: latest wins.
		hs := t.holders(child)
		rs.blocks.del(hs[at].ext)
		hs[at].ext = b.BlockHash
		rs.blocks.put(b.BlockHash, child.self)
		t.counters.Rekeyed++
		return child, nil
	}
	t.insertHolder(child, at, holder{ext: b.BlockHash, id: id})
	if parent.fan != 0 {
		fanAdd(t.fans.at(parent.fan), t.holders(child), child, at)
	}
	rs.blocks.put(b.BlockHash, child.self)
	t.entries++
	t.counters.StoredBlocks++
	return child, nil
}

// release returns an unlinked node (no parent, holders or children) to
// the arena for reuse. At steady state every store follows an eviction,
// so a router ingesting at its full rate allocates almost no nodes.
func (t *Tree) release(n *node) {
	if n.kids != 0 { // cannot happen for a node without children; never leak
		t.kids.drop(n.kids)
	}
	if n.fan != 0 {
		t.fans.drop(n.fan)
	}
	if n.nh >= 2 {
		t.sets.release(n.set)
	}
	t.arena.release(n)
}

// lookup returns the node rank id names h, or nil.
func (t *Tree) lookup(id uint32, h kv.ExternalBlockHash) *node {
	return t.node(t.ranks[id].blocks.get(h))
}

// touchAll reads the home slot of every block an event names in the
// rank's lookup before the event is applied, so the cache misses overlap
// rather than come one per block (blockMap's comment).
func (t *Tree) touchAll(m *blockMap, ev *kv.Event) {
	sum := t.touched
	for _, b := range ev.Blocks {
		sum += m.touch(b.BlockHash)
	}
	for _, h := range ev.Removed {
		sum += m.touch(h)
	}
	t.touched = sum
}

// touchTargets reads, for each node a Removed event names, what dropping
// it reads first: the node, both ends of its holder set (find's window)
// and its parent. The nodes are scattered over the heap; read one by one
// between the tree work, each is a cache miss of its own, read in one
// loop they overlap (the loads are independent).
func (t *Tree) touchTargets(nodes []*node) {
	sum := t.touched
	for _, n := range nodes {
		hs := t.holders(n)
		sum += uint64(hs[0].id) + uint64(hs[len(hs)-1].id)
		if p := t.node(n.parent); p != nil {
			sum += uint64(p.nh)
		}
	}
	t.touched = sum
}

// isAncestorOrSelf reports whether a lies on the path from n to the root.
func (t *Tree) isAncestorOrSelf(a, n *node) bool {
	for ; n != nil; n = t.node(n.parent) {
		if n == a {
			return true
		}
	}
	return false
}

func (t *Tree) applyRemoved(ev *kv.Event) error {
	id, known := t.ids[ev.Worker]
	// Resolve the whole batch first: removing a parent drops the rank's
	// descendants, and a batch often lists a parent before its children.
	t.targets = t.targets[:0]
	t.targetNames = t.targetNames[:0]
	missing := 0
	var firstMissing kv.ExternalBlockHash
	if known {
		t.touchAll(&t.ranks[id].blocks, ev)
	}
	for _, h := range ev.Removed {
		var n *node
		if known {
			n = t.lookup(id, h)
		}
		if n == nil {
			if missing == 0 {
				firstMissing = h
			}
			missing++
			continue
		}
		t.targets = append(t.targets, n)
		t.targetNames = append(t.targetNames, h)
	}
	t.touchTargets(t.targets)
	for i, n := range t.targets {
		// A target after the first may have gone with an ancestor listed
		// before it. Dropping an entry deletes its name from the rank's
		// lookup, so the lookup answers that; its slot was just read above,
		// where the node's holder set (maybe fleet-wide) is cold.
		if i == 0 || t.ranks[id].blocks.get(t.targetNames[i]) == n.self {
			dropped := t.dropSubtree(n, id)
			t.counters.RemovedBlocks++
			t.counters.CascadeRemoved += uint64(dropped - 1)
		}
	}
	t.targets = t.targets[:0]
	if missing > 0 {
		t.counters.RemoveUnknown += uint64(missing)
		return fmt.Errorf("removed event %d from %s: %d unknown hashes (first %d): %w",
			ev.EventID, ev.Worker, missing, firstMissing, ErrBlockNotFound)
	}
	return nil
}

// dropSubtree removes rank id from n and from every descendant of n it
// holds, unlinking nodes left without holders. Under the subset invariant
// the descendants id holds form a connected subtree below n, and wide nodes
// list their children by rank (fan.go), so the walk costs O(entries
// dropped), however many other ranks share those blocks.
// It returns how many entries were dropped, n's included.
func (t *Tree) dropSubtree(n *node, id uint32) int {
	t.doomed = t.doomed[:0]
	t.stack = append(t.stack[:0], n)
	for len(t.stack) > 0 {
		top := t.stack[len(t.stack)-1]
		t.stack = t.stack[:len(t.stack)-1]
		t.doomed = append(t.doomed, top)
		t.stack = t.appendHeldChildren(t.stack, top, id)
		// Every child listed is dropped below: forget the list at once
		// rather than one child at a time.
		t.dropFanOf(top, id)
	}
	// Pre-order reversed: every node is handled after its descendants, so
	// a node emptied here has no children left when it is unlinked. Only n
	// has a parent whose fan still lists it.
	dropped := len(t.doomed)
	for i := dropped - 1; i >= 0; i-- {
		t.dropEntry(t.doomed[i], id, i == 0)
	}
	t.doomed = t.doomed[:0]
	return dropped
}

// dropEntry removes rank id from one node (which must hold it), and from
// its parent's fan when unfan is set, and unlinks the node if nobody holds
// it any more.
func (t *Tree) dropEntry(n *node, id uint32, unfan bool) {
	at, ok := t.find(n, id)
	if !ok {
		return
	}
	h := t.holders(n)[at]
	ext := h.ext
	if p := t.node(n.parent); unfan && p.fan != 0 {
		t.fanRemove(p, id, h.pos)
	}
	t.deleteHolder(n, at)
	t.ranks[id].blocks.del(ext)
	t.entries--
	if p := t.node(n.parent); n.nh == 0 && p != nil {
		t.removeChild(p, n)
		t.childRemoved(p)
		t.nodes--
		t.release(n)
	}
	if t.onDrop != nil {
		t.onDrop(id, ext)
	}
}

// clearRank empties one (worker, dp_rank) and keeps it known, and
// returns how many entries it held. A Cleared event is scoped to the rank
// that sent it, as Dynamo's concurrent radix tree applies it
// (remove_worker_dp_rank): with data parallelism every rank is its own
// engine core with its own cache, restarted or reset on its own, so the
// worker's other ranks keep their blocks. A rank the tree does not know
// holds nothing.
func (t *Tree) clearRank(r kv.WorkerWithDpRank) int {
	id, ok := t.ids[r]
	if !ok {
		return 0
	}
	return t.emptyRank(id)
}

// RemoveWorker drops every rank of a worker and forgets them.
func (t *Tree) RemoveWorker(w kv.WorkerID) {
	ids := t.workers[w]
	if len(ids) == 0 {
		t.counters.UnknownWorkerRemoved++
		return
	}
	t.counters.WorkersRemoved++
	delete(t.workers, w)
	for _, id := range ids {
		t.counters.RemovedByWorker += uint64(t.emptyRank(id))
		t.releaseRank(id)
	}
}

// emptyRank removes every block of a rank and returns how many there were.
// The lookup map is replaced rather than emptied so its memory is freed.
func (t *Tree) emptyRank(id uint32) int {
	rs := &t.ranks[id]
	n := rs.blocks.len()
	// The nodes are listed first: dropping a subtree deletes entries,
	// which moves others around in the lookup.
	t.refs = rs.blocks.nodes(t.refs[:0])
	for _, r := range t.refs {
		// The ref may have been released with an ancestor, and even
		// reused by now: it is this rank's node only if the rank still
		// holds it.
		if nd := t.arena.at(r); nd.parent != 0 && t.holds(nd, id) {
			t.dropSubtree(nd, id)
		}
	}
	t.refs = t.refs[:0]
	t.ranks[id].blocks = blockMap{}
	if t.nodes == 0 {
		t.resetStorage()
	}
	return n
}

// resetStorage gives an emptied tree's storage back (arena.go: the arena
// otherwise keeps its chunks for reuse): every node chunk but the root's,
// the holder arrays, child maps and fans. A fleet that drains or restarts
// every worker thus returns its index's memory.
func (t *Tree) resetStorage() {
	a := &t.arena
	clear(a.chunks[1:])
	a.chunks = a.chunks[:1]
	a.next = t.root.self + 1 // the root is the first node handed out
	a.free = nil
	t.sets = holderPool{}
	t.kids = slab[map[kv.LocalBlockHash]nodeRef]{}
	t.fans = slab[map[uint32]*[]nodeRef]{}
}

// has reports whether rank r holds engine block h (for approximate mode).
func (t *Tree) has(r kv.WorkerWithDpRank, h kv.ExternalBlockHash) bool {
	id, ok := t.ids[r]
	return ok && t.ranks[id].blocks.get(h) != 0
}

// removeBlock drops one block and the rank's blocks below it, returning
// how many entries went (0 when the rank did not hold the block).
func (t *Tree) removeBlock(r kv.WorkerWithDpRank, h kv.ExternalBlockHash) int {
	id, ok := t.ids[r]
	if !ok {
		return 0
	}
	n := t.lookup(id, h)
	if n == nil {
		return 0
	}
	return t.dropSubtree(n, id)
}
