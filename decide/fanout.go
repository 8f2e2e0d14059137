package decide

import (
	"time"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sequence"
)

// Fanout is what one decision (or introspection query) gathers before it
// can be made: the shards' overlap replies and the replies of the ranks
// asked for their load, and how long it waits for them. Its owner sends
// the questions and hands it the replies; a reply of a fan-out no longer
// waiting is late and ignored. Time comes as now.
type Fanout struct {
	Overlaps OverlapSet
	// Shared is the prompt's longest shared-tier prefix: the max of the
	// shards' answers (each sees the stores it owns).
	Shared uint32
	// Loads are the asked ranks' replies (nil when none arrived).
	Loads    map[kv.WorkerWithDpRank]*messages.LoadReply
	Deadline time.Time

	shardsLeft, ranksLeft int
	// shardsAnswered counts the shards' replies in time: once it reaches
	// the shards asked, none reads the prompt's hashes any more (after a
	// timeout one may still).
	shardsAnswered int
}

// AskShards starts a round of n shard questions.
func (f *Fanout) AskShards(n int) {
	f.Overlaps.Reset(n)
	f.Shared, f.shardsLeft = 0, n
}

// AskLoads starts a round of load questions (AskedRank counts each).
func (f *Fanout) AskLoads() { f.Loads, f.ranksLeft = nil, 0 }

// AskedRank counts one rank asked for its load (or, for a requests query,
// its active requests).
func (f *Fanout) AskedRank() { f.ranksLeft++ }

// OnOverlap takes a shard's reply; false: the fan-out no longer waits for
// one (a late reply).
func (f *Fanout) OnOverlap(m *messages.OverlapReply) bool {
	if f.shardsLeft == 0 {
		return false
	}
	f.Overlaps.Add(m.Ranks)
	f.Shared = max(f.Shared, m.SharedBlocks)
	f.shardsLeft--
	f.shardsAnswered++
	return true
}

// OnLoad takes a rank's load reply; false when late.
func (f *Fanout) OnLoad(m *messages.LoadReply) bool {
	if f.ranksLeft == 0 {
		return false
	}
	if f.Loads == nil {
		f.Loads = make(map[kv.WorkerWithDpRank]*messages.LoadReply)
	}
	f.Loads[RankOf(m.Worker)] = m
	f.ranksLeft--
	return true
}

// OnRankReply counts a rank's reply of another kind; false when late.
func (f *Fanout) OnRankReply() bool {
	if f.ranksLeft == 0 {
		return false
	}
	f.ranksLeft--
	return true
}

// Waiting: replies are still expected (a request parked in the queue
// waits for none).
func (f *Fanout) Waiting() bool { return f.shardsLeft > 0 || f.ranksLeft > 0 }

// Expire gives up waiting at now when the deadline passed: the decision
// is made with the replies that arrived (a missing shard counts as no
// overlap, a missing load as an idle rank). It returns how many of each
// were missing; false: not expired.
func (f *Fanout) Expire(now time.Time) (shards, ranks int, expired bool) {
	if !f.Waiting() || !now.After(f.Deadline) {
		return 0, 0, false
	}
	shards, ranks = f.shardsLeft, f.ranksLeft
	f.shardsLeft, f.ranksLeft = 0, 0
	return shards, ranks, true
}

// AllShardsAnswered: every one of n shards replied to this fan-out.
func (f *Fanout) AllShardsAnswered(n int) bool { return f.shardsAnswered >= n }

// LoadTargets are the eligible ranks a decision asks for their load:
// those sharing the prompt's prefix (its first sampled hash is one of
// their roots), whose NewBlocks only they can count. Every other rank's
// load is its publication on the Board. The slice is the Decider's
// scratch, valid until the next call.
func (d *Decider) LoadTargets(eligible []kv.WorkerWithDpRank, sampled []uint64) []kv.WorkerWithDpRank {
	out := d.targets[:0]
	defer func() { d.targets = out[:0] }()
	if len(sampled) == 0 {
		return nil // shorter than a stride: nothing can be shared
	}
	root := sampled[0]
	if !d.board.Held(root) {
		return nil // no rank has a request with this prefix in flight
	}
	entry := d.board.Entries(eligible)
	for i, w := range eligible {
		if entry.At(i, w).SharesPrefix(root) {
			out = append(out, w)
		}
	}
	return out
}

// Hash computes a prompt's block hashes (appended to local) and its
// sampled sequence hashes, as the sequence actors and peers take them: one
// per stride blocks, in a slice of its own (messages are never shared
// with later mutation). With assumeReuse off (Dynamo's
// router_assume_kv_reuse=false) every block is unique: the sampled hashes
// are random draws from the Decider's source, so nothing is deduplicated
// in the active-block count and a seeded run repeats.
func (d *Decider) Hash(local []kv.LocalBlockHash, tokens []uint32, lora string, assumeReuse bool) ([]kv.LocalBlockHash, []uint64) {
	local = hashing.AppendBlockHashes(local, tokens, d.cfg.BlockSize, hashing.Options{LoraName: lora})
	stride := max(d.cfg.Stride, 1)
	sampled := make([]uint64, 0, sequence.SampledCount(len(local), stride))
	if !assumeReuse {
		for range cap(sampled) {
			sampled = append(sampled, d.rng.Uint64())
		}
		return local, sampled
	}
	// Only the sampled hashes outlive the decision (the load queries, the
	// add and its gossip carry them): the whole chain is computed in the
	// Decider's scratch.
	d.seqScratch = hashing.AppendSequenceHashes(d.seqScratch[:0], local)
	return local, sequence.AppendSample(sampled, d.seqScratch, stride)
}

// hashedTip is the last sequence hash of the chain the last Hash with
// assumed reuse computed (0 without a full block): it digests the whole
// block chain.
func (d *Decider) hashedTip() kv.SequenceHash {
	if len(d.seqScratch) == 0 {
		return 0
	}
	return d.seqScratch[len(d.seqScratch)-1]
}

// chainTip computes the last sequence hash of local's chain (in the
// Decider's scratch).
func (d *Decider) chainTip(local []kv.LocalBlockHash) kv.SequenceHash {
	d.seqScratch = hashing.AppendSequenceHashes(d.seqScratch[:0], local)
	return d.hashedTip()
}

// PotentialLoads is Dynamo's get_potential_loads over joined candidates:
// what each rank's prefill tokens and decode blocks would be with a
// prompt of isl tokens.
func (d *Decider) PotentialLoads(cands []scheduling.Candidate, isl uint64) *messages.PotentialLoadsReply {
	d.ZeroUntracked(cands)
	reply := &messages.PotentialLoadsReply{}
	for _, c := range cands {
		_, cached := scheduling.CacheHitEstimate(d.cfg.Scheduling, d.cfg.BlockSize, c.DeviceOverlap, c.HostOverlap, c.DiskOverlap)
		reply.Loads = append(reply.Loads, &messages.PotentialLoad{
			Worker:                 RankMsg(c.Worker),
			PotentialPrefillTokens: c.ActivePrefillTokens + isl - min(cached, isl),
			PotentialDecodeBlocks:  c.ActiveBlocks + float64(c.NewBlocks),
			PrefillTokensPerSec:    c.PrefillTokensPerSec,
			ActiveRequests:         uint32(c.ActiveRequests),
		})
	}
	return reply
}
