package main

import (
	"encoding/json"
	"fmt"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
)

// Wire shapes of what the worker publishes. KV events are Dynamo's
// RouterEvent JSON:
//
//	{"worker_id": 1, "storage_tier": "device",
//	 "event": {"event_id": 0, "dp_rank": 0,
//	   "data": {"stored": {"parent_hash": null, "blocks": [{"block_hash": 11, "tokens_hash": 22}]}}
//	         | {"removed": {"block_hashes": [11]}} | "cleared"}}
type (
	routerEvent struct {
		WorkerID    uint64  `json:"worker_id"`
		StorageTier string  `json:"storage_tier"`
		Event       kvEvent `json:"event"`
	}
	kvEvent struct {
		EventID uint64 `json:"event_id"`
		DpRank  uint32 `json:"dp_rank"`
		Data    any    `json:"data"` // storedData, removedData or the string "cleared"
	}
	storedData struct {
		Stored storedBody `json:"stored"`
	}
	storedBody struct {
		ParentHash *uint64       `json:"parent_hash"`
		Blocks     []storedBlock `json:"blocks"`
	}
	storedBlock struct {
		BlockHash  uint64 `json:"block_hash"`
		TokensHash uint64 `json:"tokens_hash"`
	}
	removedData struct {
		Removed removedBody `json:"removed"`
	}
	removedBody struct {
		BlockHashes []uint64 `json:"block_hashes"`
	}
	heartbeatJSON struct {
		WorkerID              uint64 `json:"worker_id"`
		URL                   string `json:"url"`
		DataParallelStartRank uint32 `json:"data_parallel_start_rank"`
		DataParallelSize      int    `json:"data_parallel_size"`
		BlockSize             int    `json:"block_size"`
		TotalKVBlocks         int    `json:"total_kv_blocks"`
		ModelName             string `json:"model_name"`
		MaxNumBatchedTokens   int    `json:"max_num_batched_tokens"`
	}
)

// encodeRouterEvent renders one KV event as Dynamo RouterEvent JSON.
func encodeRouterEvent(ev *kv.Event) ([]byte, error) {
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("encode router event: %w", err)
	}
	out := routerEvent{
		WorkerID: uint64(ev.Worker.WorkerID), StorageTier: ev.Tier.String(),
		Event: kvEvent{EventID: ev.EventID, DpRank: ev.Worker.DpRank},
	}
	switch ev.Kind {
	case kv.EventStored:
		body := storedBody{Blocks: make([]storedBlock, len(ev.Blocks))}
		if ev.HasParent {
			parent := uint64(ev.ParentHash)
			body.ParentHash = &parent
		}
		for i, b := range ev.Blocks {
			body.Blocks[i] = storedBlock{BlockHash: uint64(b.BlockHash), TokensHash: uint64(b.TokensHash)}
		}
		out.Event.Data = storedData{Stored: body}
	case kv.EventRemoved:
		hashes := make([]uint64, len(ev.Removed))
		for i, h := range ev.Removed {
			hashes[i] = uint64(h)
		}
		out.Event.Data = removedData{Removed: removedBody{BlockHashes: hashes}}
	case kv.EventCleared:
		out.Event.Data = "cleared"
	}
	return json.Marshal(out)
}

// encodeHeartbeat renders a heartbeat as the JSON routers register
// workers from.
func encodeHeartbeat(hb mockengine.Heartbeat) ([]byte, error) {
	return json.Marshal(heartbeatJSON{
		WorkerID: uint64(hb.WorkerID), URL: hb.URL, DataParallelStartRank: hb.DataParallelStartRank,
		DataParallelSize: hb.DataParallelSize, BlockSize: hb.BlockSize, TotalKVBlocks: hb.TotalKVBlocks,
		ModelName: hb.ModelName, MaxNumBatchedTokens: hb.MaxNumBatchedTokens,
	})
}
