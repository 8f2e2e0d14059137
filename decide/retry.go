package decide

import (
	"encoding/binary"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
)

// A route call retried with the request_id of a request this replica
// routed and still holds (its client lost the answer, or a load balancer
// replayed the call) is idempotent: the same prompt, model and adapter
// are answered with the recorded decision, nothing tracked or counted a
// second time (outcome "retried"); another prompt under the id is still a
// bad request (Start: "already active").

// routedCall is what a routed request's retry is answered from: the
// call's cancel token (the tracked entry must still be that call's), its
// prompt's digest and its decision.
type routedCall struct {
	token, digest uint64
	worker        kv.WorkerWithDpRank
	overlap       uint32
	cached        uint64
	prefill       kv.WorkerWithDpRank
	hasPrefill    bool
	prefillOver   uint32
	prefillCached uint64
}

// promptDigest digests a prompt as a decision saw it: its block chain
// (tip: the last sequence hash of its block hashes, which cover the
// adapter, and the chain's length), the tokens of its last partial block,
// and its model and adapter names. The tip is already computed by the
// decision's hashing, so the digest reads a few words, not every block
// hash again.
func (n *Node) promptDigest(tip kv.SequenceHash, blocks int, m *messages.RouteRequest) uint64 {
	b := binary.LittleEndian.AppendUint64(n.digestBuf[:0], uint64(tip))
	b = binary.LittleEndian.AppendUint64(b, uint64(blocks))
	for _, t := range m.TokenIds[min(blocks*n.cfg.Decider.BlockSize, len(m.TokenIds)):] {
		b = binary.LittleEndian.AppendUint32(b, t)
	}
	b = append(append(append(b, m.Model...), 0), m.LoraName...)
	n.digestBuf = b
	return xxh3.Hash(b)
}

// keepRouted remembers a routed call's decision for its retries. The
// table holds an entry per tracked request at most (plus what was freed
// since the last sweep): a sweep drops the entries of requests no longer
// tracked under their call.
func (n *Node) keepRouted(p *pending, r *messages.RouteReply) {
	if n.routed == nil {
		n.routed = map[string]routedCall{}
	}
	if len(n.routed) >= 2*n.local.Len()+64 {
		for id, c := range n.routed {
			if e, ok := n.local.Lookup(id); !ok || e.Token != c.token {
				delete(n.routed, id)
			}
		}
	}
	tip := p.tip
	if !p.hasTip { // hashed without assumed reuse: no chain was computed
		tip = n.dec.chainTip(p.local)
	}
	c := routedCall{token: p.req.CancelToken, digest: n.promptDigest(tip, len(p.local), p.req), worker: RankOf(r.Worker),
		overlap: r.OverlapBlocks, cached: r.CachedTokens, prefillOver: r.PrefillOverlapBlocks, prefillCached: r.PrefillCachedTokens}
	if r.PrefillWorker != nil {
		c.prefill, c.hasPrefill = RankOf(r.PrefillWorker), true
	}
	n.routed[p.req.RequestId] = c
}

// retried answers r from the recorded decision when it retries a routed
// call this replica still holds with the same prompt (false: it is
// decided as any call, and Start refuses another prompt under the id).
func (n *Node) retried(now time.Time, r *Route) bool {
	m := r.Req
	c, ok := n.routed[m.RequestId]
	if !ok {
		return false
	}
	if e, tracked := n.local.Lookup(m.RequestId); !tracked || e.Token != c.token {
		delete(n.routed, m.RequestId)
		return false
	}
	if CheckTokens(m.TokenIds) != nil || n.cfg.Decider.Limits.CheckRequest(len(m.TokenIds), m.RequestId) != nil {
		return false // Start refuses it
	}
	local, _ := n.dec.Hash(n.takeLocal(), m.TokenIds, m.LoraName, true) // assumed reuse: no random draw
	same := n.promptDigest(n.dec.hashedTip(), len(local), m) == c.digest
	if len(n.localFree) < localFreeMax && cap(local) <= localReuseMaxBlocks {
		n.localFree = append(n.localFree, local[:0])
	}
	if !same {
		return false
	}
	reply := &messages.RouteReply{Worker: RankMsg(c.worker), OverlapBlocks: c.overlap, CachedTokens: c.cached,
		PrefillOverlapBlocks: c.prefillOver, PrefillCachedTokens: c.prefillCached}
	if c.hasPrefill {
		reply.PrefillWorker, reply.PrefillRequestId = RankMsg(c.prefill), scheduling.PrefillRequestID(m.RequestId)
	}
	n.answer(&pending{caller: r.Caller, req: m, started: now}, &Answer{Reply: reply, Outcome: "retried", OverlapBlocks: c.overlap})
	return true
}
