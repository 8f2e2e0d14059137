package zmqevents

import (
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// TierOfMedium maps vLLM's medium to a storage tier: GPU (or none) is the
// device, CPU is pinned host memory, "shared" is the fleet-wide cache
// (kv.TierShared), anything else (disk, LMCache backends) is treated as
// disk.
func TierOfMedium(medium string) kv.StorageTier {
	switch strings.ToLower(medium) {
	case "", "gpu", "device", "cuda":
		return kv.TierDevice
	case "cpu", "host", "host_pinned":
		return kv.TierHostPinned
	case "shared":
		return kv.TierShared
	}
	return kv.TierDisk
}

// Converter turns raw engine events into the router's kv.Event. It is
// pure and safe for concurrent use.
type Converter struct {
	// BlockSize is the router's block size; a BlockStored of another
	// size is refused.
	BlockSize int
}

// Convert converts one raw event of worker w. eventID is carried into the
// kv.Event (the subscriber uses the batch sequence number).
func (c Converter) Convert(raw *RawEvent, w kv.WorkerWithDpRank, eventID uint64) (kv.Event, error) {
	ev := kv.Event{Worker: w, EventID: eventID, Kind: raw.Kind, Tier: TierOfMedium(raw.Medium)}
	switch raw.Kind {
	case kv.EventStored:
		blocks, err := c.storedBlocks(raw)
		if err != nil {
			return kv.Event{}, err
		}
		ev.Blocks = blocks
		ev.HasParent, ev.ParentHash = raw.HasParent, kv.ExternalBlockHash(raw.ParentHash)
	case kv.EventRemoved:
		ev.Removed = make([]kv.ExternalBlockHash, len(raw.BlockHashes))
		for i, h := range raw.BlockHashes {
			ev.Removed[i] = kv.ExternalBlockHash(h)
		}
	case kv.EventCleared:
	default:
		return kv.Event{}, fmt.Errorf("%w: kind %d", ErrUnknownEventType, raw.Kind)
	}
	return ev, nil
}

// storedBlocks hashes the event's tokens the way the router hashes a
// prompt, pairing each local hash with the engine's hash of that block.
func (c Converter) storedBlocks(raw *RawEvent) ([]kv.StoredBlock, error) {
	n := len(raw.BlockHashes)
	switch {
	case n == 0:
		return nil, malformed("BlockStored has no blocks")
	case raw.BlockSize != c.BlockSize:
		return nil, fmt.Errorf("%w: engine %d, router %d", ErrBlockSizeMismatch, raw.BlockSize, c.BlockSize)
	case len(raw.TokenIDs) < n*c.BlockSize:
		return nil, fmt.Errorf("%w: %d blocks of %d need %d tokens, got %d",
			ErrTokensShort, n, c.BlockSize, n*c.BlockSize, len(raw.TokenIDs))
	}
	local := hashing.BlockHashes(raw.TokenIDs[:n*c.BlockSize], c.BlockSize,
		hashing.Options{LoraName: raw.LoraName, ExtraKeys: raw.ExtraKeys})
	blocks := make([]kv.StoredBlock, n)
	for i := range blocks {
		blocks[i] = kv.StoredBlock{BlockHash: kv.ExternalBlockHash(raw.BlockHashes[i]), TokensHash: local[i]}
	}
	return blocks, nil
}
