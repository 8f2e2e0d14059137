package index

import "github.com/kvrouter/kvrouter/kv"

// shardView is what a shard actor asks of either index flavour; this file
// fails to compile if Indexer or Approx drift from it.
type shardView interface {
	FindMatches([]kv.LocalBlockHash) map[kv.WorkerWithDpRank]TierMatch
	RemoveWorker(kv.WorkerID)
	WorkerBlockCounts() map[kv.WorkerWithDpRank]uint64
	Digest() uint64
	CounterMap() map[string]uint64
	CheckInvariants() error
}

var (
	_ shardView = (*Indexer)(nil)
	_ shardView = (*Approx)(nil)
)
