package zmqevents

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/hashing"
	"github.com/kvrouter/kvrouter/kv"
)

// TierOfMedium maps an engine's medium to a storage tier, with Dynamo's
// names (dynamo-kv-router StorageTier::from_kv_medium), any case:
//
//	"" GPU DEVICE CUDA                          device
//	CPU CPU_PINNED CPU_TIER1 HOST HOST_PINNED   host pinned
//	CPU_TIER2 DISK NVME STORAGE                 disk
//	EXTERNAL NETWORK REMOTE                     disk (see below)
//	SHARED                                      shared (kv.TierShared)
//
// Dynamo scores its External tier exactly as Disk (same
// disk_cache_hit_weight, summed into the same disk bucket), so external
// media land in the disk tier here and are scored with that weight.
// SHARED differs from Dynamo on purpose: this router has a fleet-wide
// shared tier (LMCache, Mooncake, HiCache L3) credited to every worker.
// ok is false for a medium no tier is known for.
func TierOfMedium(medium string) (tier kv.StorageTier, ok bool) {
	switch strings.ToUpper(medium) {
	case "", "GPU", "DEVICE", "CUDA":
		return kv.TierDevice, true
	case "CPU", "CPU_PINNED", "CPU_TIER1", "HOST", "HOST_PINNED":
		return kv.TierHostPinned, true
	case "CPU_TIER2", "DISK", "NVME", "STORAGE":
		return kv.TierDisk, true
	case "EXTERNAL", "NETWORK", "REMOTE":
		return kv.TierDisk, true
	case "SHARED":
		return kv.TierShared, true
	}
	return kv.TierDevice, false
}

// LoraIDNamespace is the LoRA name a block stored with a lora_id and no
// adapter name is hashed under. It starts with a NUL byte, which no served
// model or adapter name has, so no query (base model or adapter) matches
// those blocks: without the name the router cannot know which adapter's
// prompts they serve, and counting them as base-model blocks would
// credit a worker for a cache the base model cannot use.
func LoraIDNamespace(id int64) string { return "\x00lora_id:" + strconv.FormatInt(id, 10) }

// Converter turns raw engine events into the router's kv.Event. It is
// pure and safe for concurrent use.
type Converter struct {
	// BlockSize is the router's block size; a BlockStored of another
	// size is refused.
	BlockSize int
}

// Conversion is one converted event and what the caller must count about
// it besides.
type Conversion struct {
	Event kv.Event
	// LoraIDWithoutName is set when the event was indexed under
	// LoraIDNamespace (ReasonLoraIDWithoutName).
	LoraIDWithoutName bool
	// LoraNameNotInExtraKeys is set when a LoRA event's extra keys did
	// not start with its adapter name (ReasonLoraNameNotInExtraKeys).
	LoraNameNotInExtraKeys bool
}

// Convert converts one raw event of worker w. eventID is carried into the
// kv.Event (the subscriber uses the batch sequence number). Errors are
// classified by ReasonOf.
func (c Converter) Convert(raw *RawEvent, w kv.WorkerWithDpRank, eventID uint64) (kv.Event, error) {
	out, err := c.ConvertNoted(raw, w, eventID)
	return out.Event, err
}

// ConvertNoted is Convert reporting what the caller must count.
func (c Converter) ConvertNoted(raw *RawEvent, w kv.WorkerWithDpRank, eventID uint64) (Conversion, error) {
	if raw.Kind == 0 && raw.UnknownType != "" {
		return Conversion{}, fmt.Errorf("%w %q", ErrUnknownEventType, raw.UnknownType)
	}
	ev := kv.Event{Worker: w, EventID: eventID, Kind: raw.Kind}
	if raw.Kind == kv.EventStored || raw.Kind == kv.EventRemoved {
		tier, ok := TierOfMedium(raw.Medium)
		if !ok {
			return Conversion{}, fmt.Errorf("%w %q", ErrUnknownMedium, clipTag([]byte(raw.Medium)))
		}
		ev.Tier = tier
	}
	var out Conversion
	switch raw.Kind {
	case kv.EventStored:
		blocks, keys, err := c.storedBlocks(raw)
		if err != nil {
			return Conversion{}, err
		}
		out.LoraIDWithoutName, out.LoraNameNotInExtraKeys = keys.withoutName, keys.nameNotInExtra
		ev.Blocks = blocks
		ev.HasParent, ev.ParentHash = raw.HasParent, kv.ExternalBlockHash(raw.ParentHash)
	case kv.EventRemoved:
		ev.Removed = make([]kv.ExternalBlockHash, len(raw.BlockHashes))
		for i, h := range raw.BlockHashes {
			ev.Removed[i] = kv.ExternalBlockHash(h)
		}
	case kv.EventCleared:
	default:
		return Conversion{}, malformed("event kind %d", raw.Kind)
	}
	out.Event = ev
	return out, nil
}

// storedBlocks hashes the event's tokens the way the router hashes a
// prompt, pairing each local hash with the engine's hash of that block.
func (c Converter) storedBlocks(raw *RawEvent) ([]kv.StoredBlock, loraKeysOf, error) {
	n := len(raw.BlockHashes)
	switch {
	case n == 0:
		return nil, loraKeysOf{}, malformed("BlockStored has no blocks")
	case isShortLastPage(raw, c.BlockSize):
		return nil, loraKeysOf{}, fmt.Errorf("%w: a page of %d tokens, blocks are %d", ErrShortPage, raw.BlockSize, c.BlockSize)
	case raw.BlockSize != c.BlockSize:
		return nil, loraKeysOf{}, fmt.Errorf("%w: engine %d, router %d", ErrBlockSizeMismatch, raw.BlockSize, c.BlockSize)
	case len(raw.TokenIDs) < n*c.BlockSize:
		return nil, loraKeysOf{}, fmt.Errorf("%w: %d blocks of %d need %d tokens, got %d",
			ErrTokensShort, n, c.BlockSize, n*c.BlockSize, len(raw.TokenIDs))
	}
	keys := loraKeys(raw)
	local := hashing.BlockHashes(raw.TokenIDs[:n*c.BlockSize], c.BlockSize,
		hashing.Options{LoraName: keys.name, ExtraKeys: keys.extra})
	blocks := make([]kv.StoredBlock, n)
	for i := range blocks {
		blocks[i] = kv.StoredBlock{BlockHash: kv.ExternalBlockHash(raw.BlockHashes[i]), TokensHash: local[i]}
	}
	return blocks, keys, nil
}

// isShortLastPage recognises SGLang's per-page form ending a radix node:
// one block whose block_size is the page's own length, shorter than a
// block, with exactly that many tokens (SGLang's _record_store_event
// emits BlockStored(block_hashes=[h], token_ids=page, block_size=len(page))
// for every page, the last one possibly short).
func isShortLastPage(raw *RawEvent, blockSize int) bool {
	return len(raw.BlockHashes) == 1 && raw.BlockSize < blockSize && len(raw.TokenIDs) == raw.BlockSize
}

// loraKeys returns the LoRA name to salt the block hashes with and the
// per-block extra keys left once the name is taken out of them, the way
// the router hashes a request for that adapter (hashing.SaltedSeed of
// the adapter name, no extra keys).
//
// vLLM (v1/core/kv_cache_utils.py, generate_block_hash_extra_keys) puts a
// LoRA request's adapter name first in every block's extra_keys tuple,
// and since lora_name was added to BlockStored it sends the name there
// too. An event that says it is a LoRA one (lora_name or lora_id set) has
// the leading string of each tuple taken out when it is the adapter's
// name (or, with no lora_name, when every block leads with the same
// string: that is the name). Without a name anywhere, the blocks are
// hashed under LoraIDNamespace.
func loraKeys(raw *RawEvent) loraKeysOf {
	k := loraKeysOf{name: raw.LoraName, extra: raw.ExtraKeys}
	if k.name == "" && !raw.HasLoraID {
		return k // base model: a leading string is a cache salt
	}
	if k.name == "" {
		k.name = commonLead(raw)
	}
	if k.name != "" && raw.ExtraKeys != nil {
		k.extra = make([][]uint64, len(raw.ExtraKeys))
		for i := range k.extra {
			switch {
			case i < len(raw.ExtraLead) && raw.ExtraLead[i] == k.name:
				k.extra[i] = raw.ExtraRest[i]
			case len(raw.ExtraKeys[i]) > 0:
				k.extra[i] = raw.ExtraKeys[i]
				k.nameNotInExtra = true
			}
		}
	}
	if k.name == "" {
		k.name, k.withoutName = LoraIDNamespace(raw.LoraID), true
	}
	return k
}

// loraKeysOf is what loraKeys found: the salt, the extra keys left, and
// whether a LoRA reason must be counted.
type loraKeysOf struct {
	name           string
	extra          [][]uint64
	withoutName    bool
	nameNotInExtra bool
}

// commonLead is the string every block's extra-keys tuple starts with, or
// "" when blocks differ or one has none.
func commonLead(raw *RawEvent) string {
	if len(raw.ExtraLead) == 0 || len(raw.ExtraLead) < len(raw.BlockHashes) {
		return ""
	}
	lead := raw.ExtraLead[0]
	for _, l := range raw.ExtraLead[1:len(raw.BlockHashes)] {
		if l != lead {
			return ""
		}
	}
	return lead
}
