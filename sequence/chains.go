package sequence

import "github.com/kvrouter/kvrouter/kv"

// chainSet is a rank's active prompt blocks, keyed by their sequence
// hashes, as a trie of hash chains.
//
// A sequence hash names its block's whole prefix, so the blocks of the
// active requests form a forest: requests that share blocks share a
// prefix of their chains and part at one block. Each edge of the trie is
// a run of blocks held by the same set of requests, so one reference
// count and one weight stand for the whole run.
//
// A table with an entry per block (one probe per hash, at a random place
// in memory) made every add and free touch a cold cache line per block,
// on the deciding replica and again on every peer applying the gossip:
// the largest share of a decision's CPU. Here an add or a free walks the
// request's chain along the edges it shares (contiguous hashes compared in
// order) and adds or drops one edge for the rest.
type chainSet struct {
	roots  map[kv.SequenceHash]*chainEdge // by the edge's first hash
	blocks int                            // hashes on all edges: the distinct blocks held
}

// chainEdge is a run of blocks with the same holders. hashes shares the
// array of the request that brought the run (AddRequest keeps a
// request's hashes unmodified), so an edge costs no copy; a run another
// request still holds keeps that array alive until it is released.
type chainEdge struct {
	hashes   []kv.SequenceHash
	refs     int32   // requests holding the run
	weight   float64 // the run's weight in ActiveBlocks, per block
	children map[kv.SequenceHash]*chainEdge
}

// commonPrefix is how many leading hashes a and b share.
func commonPrefix(a, b []kv.SequenceHash) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// split cuts e after its first n hashes (0 < n < len): the rest, with
// e's holders, weight and children, becomes e's only child.
func (e *chainEdge) split(n int) {
	rest := &chainEdge{hashes: e.hashes[n:], refs: e.refs, weight: e.weight, children: e.children}
	e.hashes = e.hashes[:n:n]
	e.children = map[kv.SequenceHash]*chainEdge{rest.hashes[0]: rest}
}

// add records one more holder of every block of hs. Each block already
// held counts fully again (a decayed block picked up by a new request is
// needed for that request's whole life): the returned delta is the
// change of Σ weight·stride. root reports that hs[0] was not held.
func (c *chainSet) add(hs []kv.SequenceHash, stride float64) (delta float64, root bool) {
	if len(hs) == 0 {
		return 0, false
	}
	if c.roots == nil {
		c.roots = make(map[kv.SequenceHash]*chainEdge)
	}
	e := c.roots[hs[0]]
	if e == nil {
		c.roots[hs[0]] = c.newEdge(hs)
		return stride * float64(len(hs)), true
	}
	for {
		n := commonPrefix(e.hashes, hs)
		if n < len(e.hashes) {
			e.split(n)
		}
		delta += stride * float64(n) * (1 - e.weight)
		e.refs++
		e.weight = 1
		hs = hs[n:]
		if len(hs) == 0 {
			return delta, false
		}
		next := e.children[hs[0]]
		if next == nil {
			if e.children == nil {
				e.children = make(map[kv.SequenceHash]*chainEdge)
			}
			e.children[hs[0]] = c.newEdge(hs)
			return delta + stride*float64(len(hs)), false
		}
		e = next
	}
}

func (c *chainSet) newEdge(hs []kv.SequenceHash) *chainEdge {
	c.blocks += len(hs)
	return &chainEdge{hashes: hs, refs: 1, weight: 1}
}

// remove drops one holder of every block of hs, which add recorded;
// blocks left with none are forgotten. delta is the change of
// Σ weight·stride; root reports that hs[0] is no longer held.
func (c *chainSet) remove(hs []kv.SequenceHash, stride float64) (delta float64, root bool) {
	if len(hs) == 0 {
		return 0, false
	}
	e := c.roots[hs[0]]
	parent := (*chainEdge)(nil)
	for e != nil {
		n := commonPrefix(e.hashes, hs)
		if n < len(e.hashes) {
			// Not the chain add recorded (only a request's own hashes
			// reach here, so this does not happen): leave the rest be.
			return delta, root
		}
		e.refs--
		if e.refs <= 0 {
			// Nobody else holds the run, so nobody holds anything below
			// it but hs itself: the walk goes on to release that.
			delta -= stride * float64(n) * e.weight
			c.blocks -= n
			if parent == nil {
				delete(c.roots, e.hashes[0])
				root = true
			} else {
				delete(parent.children, e.hashes[0])
			}
		}
		hs = hs[n:]
		if len(hs) == 0 {
			return delta, root
		}
		parent, e = e, e.children[hs[0]]
	}
	return delta, root
}

// decay sets the weight of every block of hs held by that request alone
// to frac (AddOutputBlock) and returns the change of Σ weight·stride.
func (c *chainSet) decay(hs []kv.SequenceHash, frac, stride float64) (delta float64) {
	if len(hs) == 0 {
		return 0
	}
	for e := c.roots[hs[0]]; e != nil; {
		n := commonPrefix(e.hashes, hs)
		if n < len(e.hashes) {
			return delta
		}
		if e.refs == 1 {
			delta += stride * float64(n) * (frac - e.weight)
			e.weight = frac
		}
		hs = hs[n:]
		if len(hs) == 0 {
			return delta
		}
		e = e.children[hs[0]]
	}
	return delta
}

// heldPrefix is how many leading hashes of hs are held.
func heldPrefix[H ~uint64](c *chainSet, hs []H) int {
	if len(hs) == 0 {
		return 0
	}
	held := 0
	for e := c.roots[kv.SequenceHash(hs[0])]; e != nil; {
		n := 0
		for n < len(e.hashes) && n < len(hs) && e.hashes[n] == kv.SequenceHash(hs[n]) {
			n++
		}
		held += n
		if n < len(e.hashes) || n == len(hs) {
			return held
		}
		hs = hs[n:]
		e = e.children[kv.SequenceHash(hs[0])]
	}
	return held
}

// rootHashes lists the first hash of every chain held.
func (c *chainSet) rootHashes() []kv.SequenceHash {
	out := make([]kv.SequenceHash, 0, len(c.roots))
	for h := range c.roots {
		out = append(out, h)
	}
	return out
}
