package bench

import (
	"fmt"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// OracleHitRate is the prefix hit rate of a router with perfect placement
// over engines with infinite cache: a prompt block counts as a hit when
// its whole prefix chain (its sequence hash) appeared in an earlier
// request. Requests are taken in arrival order. It is an upper bound for
// every real policy, which also loses blocks to eviction and splits
// prefixes across workers.
func OracleHitRate(reqs []Request, blockSize int) (float64, error) {
	if blockSize <= 0 {
		return 0, fmt.Errorf("%w: block size must be > 0, got %d", ErrBadWorkload, blockSize)
	}
	seen := make(map[kv.SequenceHash]struct{})
	var hit, total int
	for _, r := range reqs {
		total += len(r.Tokens)
		seqs := hashing.SequenceHashes(hashing.BlockHashes(r.Tokens, blockSize, hashing.Options{}))
		for _, s := range seqs {
			if _, ok := seen[s]; !ok {
				break // a chain miss: later blocks have an unseen prefix
			}
			hit += blockSize
		}
		for _, s := range seqs {
			seen[s] = struct{}{}
		}
	}
	if total == 0 {
		return 0, nil
	}
	return float64(hit) / float64(total), nil
}
