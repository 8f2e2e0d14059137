package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/kvrouter/kvrouter/kv"
)

// routerEventJSON is Dynamo's RouterEvent for encoding/json:
//
//	{"worker_id": 1, "storage_tier": "device",
//	 "event": {"event_id": 42, "dp_rank": 0,
//	   "data": {"stored": {"parent_hash": null, "blocks": [{"block_hash": 1, "tokens_hash": 2}]}}}}
//
// data is {"removed": {"block_hashes": [...]}} or "cleared" otherwise.
type routerEventJSON struct {
	WorkerID    *hashNum     `json:"worker_id"`
	StorageTier string       `json:"storage_tier,omitempty"`
	DpRank      *hashNum     `json:"dp_rank,omitempty"` // some publishers put it at the top
	Event       *kvEventJSON `json:"event"`
}

type kvEventJSON struct {
	EventID *hashNum        `json:"event_id"`
	DpRank  *hashNum        `json:"dp_rank,omitempty"`
	Data    json.RawMessage `json:"data"`
}

type storedJSON struct {
	ParentHash *hashNum          `json:"parent_hash"`
	Blocks     []storedBlockJSON `json:"blocks"`
}

type storedBlockJSON struct {
	BlockHash  *hashNum `json:"block_hash"`
	TokensHash *hashNum `json:"tokens_hash"`
}

type removedJSON struct {
	BlockHashes []hashNum `json:"block_hashes"`
}

// hashNum is a u64 on the wire that engines may also send as a negative
// i64 (reinterpreted bit for bit, as Dynamo does). It never goes through
// float64, so no precision is lost.
type hashNum uint64

func (h *hashNum) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		*h = hashNum(u)
		return nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		*h = hashNum(uint64(i))
		return nil
	}
	return fmt.Errorf("%s is not a 64-bit integer", truncate(s))
}

// referenceDecode is the encoding/json decoder the scanner replaced. It
// stays as an oracle: on well-formed documents both must agree.
func referenceDecode(data []byte) (kv.Event, error) {
	var raw routerEventJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return kv.Event{}, malformed("router event JSON: %v", err)
	}
	return raw.toEvent()
}

func (r *routerEventJSON) toEvent() (kv.Event, error) {
	var ev kv.Event
	if r.WorkerID == nil {
		return ev, malformed("worker_id is required")
	}
	if r.Event == nil {
		return ev, malformed("event is required")
	}
	ev.Worker.WorkerID = kv.WorkerID(*r.WorkerID)
	tier, err := kv.ParseStorageTier(r.StorageTier)
	if err != nil {
		return ev, malformed("storage_tier: %v", err)
	}
	ev.Tier = tier
	if r.Event.EventID != nil {
		ev.EventID = uint64(*r.Event.EventID)
	}
	rank := r.DpRank
	if r.Event.DpRank != nil {
		rank = r.Event.DpRank
	}
	if rank != nil {
		if uint64(*rank) > 1<<32-1 {
			return ev, malformed("dp_rank %d does not fit in uint32", uint64(*rank))
		}
		ev.Worker.DpRank = uint32(*rank)
	}
	if err := decodeData(r.Event.Data, &ev); err != nil {
		return ev, err
	}
	if err := ev.Validate(); err != nil {
		return ev, malformed("%v", err)
	}
	return ev, nil
}

func decodeData(data json.RawMessage, ev *kv.Event) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return malformed("event.data is required")
	}
	if data[0] == '"' {
		var s string
		if err := json.Unmarshal(data, &s); err != nil || (s != "cleared" && s != "Cleared") {
			return malformed("event.data: want \"cleared\" or an object, got %s", truncate(string(data)))
		}
		ev.Kind = kv.EventCleared
		return nil
	}
	var variants map[string]json.RawMessage
	if err := json.Unmarshal(data, &variants); err != nil {
		return malformed("event.data: %v", err)
	}
	if len(variants) != 1 {
		return malformed("event.data must hold exactly one of stored, removed, cleared")
	}
	for kind, body := range variants {
		switch kind {
		case "stored", "Stored":
			var s storedJSON
			if err := json.Unmarshal(body, &s); err != nil {
				return malformed("event.data.stored: %v", err)
			}
			ev.Kind = kv.EventStored
			if s.ParentHash != nil {
				ev.HasParent, ev.ParentHash = true, kv.ExternalBlockHash(*s.ParentHash)
			}
			ev.Blocks = make([]kv.StoredBlock, len(s.Blocks))
			for i, b := range s.Blocks {
				if b.BlockHash == nil || b.TokensHash == nil {
					return malformed("event.data.stored.blocks[%d]: block_hash and tokens_hash are required", i)
				}
				ev.Blocks[i] = kv.StoredBlock{BlockHash: kv.ExternalBlockHash(*b.BlockHash), TokensHash: kv.LocalBlockHash(*b.TokensHash)}
			}
		case "removed", "Removed":
			var r removedJSON
			if err := json.Unmarshal(body, &r); err != nil {
				return malformed("event.data.removed: %v", err)
			}
			ev.Kind = kv.EventRemoved
			ev.Removed = make([]kv.ExternalBlockHash, len(r.BlockHashes))
			for i, h := range r.BlockHashes {
				ev.Removed[i] = kv.ExternalBlockHash(h)
			}
		case "cleared", "Cleared":
			ev.Kind = kv.EventCleared
		default:
			return malformed("event.data: unknown event %q", truncate(kind))
		}
	}
	return nil
}
