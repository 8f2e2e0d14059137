package events

import (
	"encoding/json"
	"fmt"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/messages"
)

// Heartbeat is a worker's announcement on the workers subject.
type Heartbeat struct {
	WorkerID              uint64 `json:"worker_id"`
	URL                   string `json:"url,omitempty"`
	DataParallelStartRank uint32 `json:"data_parallel_start_rank"`
	DataParallelSize      uint32 `json:"data_parallel_size"`
	BlockSize             uint32 `json:"block_size,omitempty"`
	TotalKVBlocks         uint64 `json:"total_kv_blocks,omitempty"`
	ModelName             string `json:"model_name,omitempty"`
	KVEventsEndpoint      string `json:"kv_events_endpoint,omitempty"`
	ReplayEndpoint        string `json:"replay_endpoint,omitempty"`
	MaxNumBatchedTokens   uint64 `json:"max_num_batched_tokens,omitempty"`
	// Role is "prefill", "decode" or "both" (default, also when empty).
	Role string `json:"role,omitempty"`
}

// MaxDataParallelSize bounds an announced dp size: each rank becomes an
// actor, so a corrupt heartbeat must not spawn millions of them.
const MaxDataParallelSize = 1024

// DecodeHeartbeat decodes and checks a heartbeat. worker_id is required;
// data_parallel_size defaults to 1.
func DecodeHeartbeat(data []byte) (Heartbeat, error) {
	var raw struct {
		Heartbeat
		WorkerID         *uint64 `json:"worker_id"`
		DataParallelSize *uint32 `json:"data_parallel_size"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return Heartbeat{}, malformed("heartbeat JSON: %v", err)
	}
	hb := raw.Heartbeat
	if raw.WorkerID == nil {
		return hb, malformed("heartbeat: worker_id is required")
	}
	hb.WorkerID = *raw.WorkerID
	hb.DataParallelSize = 1
	if raw.DataParallelSize != nil {
		hb.DataParallelSize = *raw.DataParallelSize
	}
	if hb.DataParallelSize == 0 || hb.DataParallelSize > MaxDataParallelSize {
		return hb, malformed("heartbeat: data_parallel_size must be in 1..%d, got %d", MaxDataParallelSize, hb.DataParallelSize)
	}
	if uint64(hb.DataParallelStartRank)+uint64(hb.DataParallelSize) > 1<<32 {
		return hb, malformed("heartbeat: ranks %d..%d+%d do not fit in uint32",
			hb.DataParallelStartRank, hb.DataParallelStartRank, hb.DataParallelSize-1)
	}
	if _, err := kv.ParseRole(hb.Role); err != nil {
		return hb, malformed("heartbeat: %v", err)
	}
	return hb, nil
}

// EncodeHeartbeat writes a heartbeat as JSON.
func EncodeHeartbeat(hb Heartbeat) ([]byte, error) {
	data, err := json.Marshal(hb)
	if err != nil {
		return nil, fmt.Errorf("encode heartbeat: %w", err)
	}
	return data, nil
}

// Proto converts a heartbeat to the registry's message.
func (hb Heartbeat) Proto() *messages.WorkerHeartbeat {
	return &messages.WorkerHeartbeat{
		WorkerId: hb.WorkerID, Url: hb.URL, DataParallelStartRank: hb.DataParallelStartRank,
		DataParallelSize: hb.DataParallelSize, BlockSize: hb.BlockSize, TotalKvBlocks: hb.TotalKVBlocks,
		ModelName: hb.ModelName, KvEventsEndpoint: hb.KVEventsEndpoint, ReplayEndpoint: hb.ReplayEndpoint,
		MaxNumBatchedTokens: hb.MaxNumBatchedTokens, Role: RoleProto(hb.Role),
	}
}

// RoleProto maps a role name to the wire enum; an unknown name (which
// DecodeHeartbeat refuses) is both.
func RoleProto(name string) messages.WorkerRole {
	r, err := kv.ParseRole(name)
	if err != nil {
		return messages.WorkerRole_WORKER_ROLE_BOTH
	}
	return messages.WorkerRole(r)
}
