// Package kv holds the vocabulary shared by every part of the router: who a
// worker is, what a block hash is, and what a KV-cache event says. It has no
// logic beyond small helpers so every other package can depend on it.
package kv

import (
	"cmp"
	"fmt"
	"slices"
)

// WorkerID identifies one engine instance (Dynamo's worker_id / instance id).
type WorkerID uint64

// WorkerWithDpRank is the unit the router schedules onto: one data-parallel
// rank of one worker. With data parallelism off, DpRank is 0.
type WorkerWithDpRank struct {
	WorkerID WorkerID
	DpRank   uint32
}

func (w WorkerWithDpRank) String() string { return fmt.Sprintf("%d/%d", w.WorkerID, w.DpRank) }

// CompareRanks orders ranks by worker id, then dp rank (for slices.SortFunc):
// the stable candidate order every replica uses.
func CompareRanks(a, b WorkerWithDpRank) int {
	if c := cmp.Compare(a.WorkerID, b.WorkerID); c != 0 {
		return c
	}
	return cmp.Compare(a.DpRank, b.DpRank)
}

// LocalBlockHash is the content hash of one full block of tokens (Dynamo's
// LocalBlockHash / tokens_hash). The radix tree is navigated by it.
type LocalBlockHash uint64

// ExternalBlockHash is the engine's own identifier of a cached block (Dynamo's
// ExternalSequenceBlockHash / block_hash). The router treats it as an opaque
// per-worker key: it is only used to find the block again on removal and to
// find a stored event's parent.
type ExternalBlockHash uint64

// SequenceHash is the chained hash of a block and everything before it. It
// identifies a prefix, so two requests that share a prefix share hashes; the
// active-sequence tracker and approximate mode key blocks by it.
type SequenceHash uint64

// StorageTier is where an engine holds a cached block. Only Device blocks
// are fully credited; lower tiers earn a fraction (host_cache_hit_weight,
// disk_cache_hit_weight) because they must be copied back before use.
type StorageTier uint8

const (
	TierDevice StorageTier = iota
	TierHostPinned
	TierDisk
	TierExternal
	// TierShared holds blocks in a fleet-wide cache (LMCache, Mooncake
	// store, HiCache L3) that any worker can load: they belong to no
	// worker, so they never count in a worker's own overlap; every worker
	// is credited shared_cache_multiplier per shared block beyond its
	// device prefix (scheduling.SharedCredit).
	TierShared
	NumTiers
)

var tierNames = [...]string{"device", "host_pinned", "disk", "external", "shared"}

func (t StorageTier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// ParseStorageTier maps Dynamo's storage_tier strings (and the vLLM medium
// names) to a tier. An empty string means device, as Dynamo's default.
func ParseStorageTier(s string) (StorageTier, error) {
	switch s {
	case "", "device", "gpu", "GPU", "Device":
		return TierDevice, nil
	case "host_pinned", "host", "cpu", "CPU", "HostPinned":
		return TierHostPinned, nil
	case "disk", "Disk", "DISK":
		return TierDisk, nil
	case "external", "External":
		return TierExternal, nil
	case "shared", "Shared", "SHARED":
		return TierShared, nil
	}
	return 0, fmt.Errorf("unknown storage tier %q", s)
}

// StoredBlock is one block of a Stored event.
type StoredBlock struct {
	BlockHash  ExternalBlockHash
	TokensHash LocalBlockHash
}

// EventKind says which of the three KV-cache events an Event carries.
type EventKind uint8

const (
	EventStored EventKind = iota + 1
	EventRemoved
	EventCleared
)

func (k EventKind) String() string {
	switch k {
	case EventStored:
		return "stored"
	case EventRemoved:
		return "removed"
	case EventCleared:
		return "cleared"
	}
	return "unknown"
}

// Event is one KV-cache event from one worker rank, already decoded from
// whatever wire format carried it (Dynamo JSON, protobuf, vLLM msgpack).
type Event struct {
	Worker  WorkerWithDpRank
	EventID uint64
	Tier    StorageTier
	Kind    EventKind

	// Stored: the chain of new blocks, attached under ParentHash when
	// HasParent (else at the root).
	HasParent  bool
	ParentHash ExternalBlockHash
	Blocks     []StoredBlock

	// Removed: the engine hashes of evicted blocks.
	Removed []ExternalBlockHash
}

// Validate checks the shape of an event: the kind is known and a stored
// event names at least one block. It does not check against the index.
func (e *Event) Validate() error {
	switch e.Kind {
	case EventStored:
		if len(e.Blocks) == 0 {
			return fmt.Errorf("stored event for worker %s has no blocks", e.Worker)
		}
	case EventRemoved, EventCleared:
	default:
		return fmt.Errorf("event for worker %s has unknown kind %d", e.Worker, e.Kind)
	}
	if e.Tier >= NumTiers {
		return fmt.Errorf("event for worker %s has unknown tier %d", e.Worker, e.Tier)
	}
	return nil
}

// Clone returns e with its own copies of Blocks and Removed, for keeping
// an event whose slices the caller will reuse.
func (e Event) Clone() Event {
	e.Blocks = slices.Clone(e.Blocks)
	e.Removed = slices.Clone(e.Removed)
	return e
}

// WorkerState is how routable a worker rank is. Only Active ranks take new
// requests; the others keep their requests in flight, their indexed blocks
// and their load tracking, so a rank that recovers routes on warm. When
// several conditions hold the most lasting one is reported: Draining, then
// Unhealthy, then Busy.
type WorkerState uint8

const (
	// WorkerActive: routable.
	WorkerActive WorkerState = iota
	// WorkerBusy: the engine's own waiting queue or KV usage is over the
	// busy thresholds (Dynamo's busy detection).
	WorkerBusy
	// WorkerUnhealthy: its health check fails, or its pod is not Ready.
	WorkerUnhealthy
	// WorkerDraining: it left discovery; requests in flight finish and the
	// worker is removed after the drain grace period.
	WorkerDraining
	NumWorkerStates
)

var workerStateNames = [...]string{"active", "busy", "unhealthy", "draining"}

func (s WorkerState) String() string {
	if int(s) < len(workerStateNames) {
		return workerStateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Role is which phase of a request a worker serves in a disaggregated
// fleet (Dynamo's worker_type, llm-d's llm-d.ai/role label). A fleet
// whose workers are all RoleBoth is aggregated: each request is prefilled
// and decoded where it is routed.
type Role uint8

const (
	// RoleBoth (the default): prefill and decode.
	RoleBoth Role = iota
	// RolePrefill: computes prompts and hands their KV blocks to a decode
	// worker (vLLM's kv_role kv_producer).
	RolePrefill
	// RoleDecode: generates from KV blocks a prefill worker computed
	// (kv_consumer); it may also prefill short prompts itself.
	RoleDecode
	NumRoles
)

var roleNames = [...]string{"both", "prefill", "decode"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// ParseRole reads a role name; "" is RoleBoth.
func ParseRole(s string) (Role, error) {
	if s == "" {
		return RoleBoth, nil
	}
	for i, n := range roleNames {
		if s == n {
			return Role(i), nil
		}
	}
	return RoleBoth, fmt.Errorf("unknown worker role %q (want both, prefill or decode)", s)
}

// Prefills reports whether a worker of this role may prefill a request
// that is decoded elsewhere.
func (r Role) Prefills() bool { return r == RoleBoth || r == RolePrefill }

// Decodes reports whether a worker of this role may decode.
func (r Role) Decodes() bool { return r == RoleBoth || r == RoleDecode }
