package index

// Counters are the running totals of what a tree did with its input. They
// only grow (except when a new tree replaces an old one) so they map onto
// Prometheus counters.
type Counters struct {
	EventsApplied   uint64 // events applied without error
	StoredBlocks    uint64 // (rank, block) entries added by Stored events
	RemovedBlocks   uint64 // entries removed because a Removed event named them
	CascadeRemoved  uint64 // entries removed because an ancestor was removed for the same rank
	Cleared         uint64 // Cleared events
	ClearedBlocks   uint64 // entries removed by Cleared events
	WorkersRemoved  uint64 // RemoveWorker calls that found the worker
	RemovedByWorker uint64 // entries removed by RemoveWorker

	ParentNotFound       uint64 // Stored events skipped: parent unknown
	DuplicateStore       uint64 // blocks stored again with the same engine hash: no-op
	Rekeyed              uint64 // blocks stored again under a new engine hash
	Moved                uint64 // engine hashes reused for a different block
	RemoveUnknown        uint64 // hashes in Removed events the rank did not hold
	InvalidEvent         uint64 // events rejected by shape
	InvalidSequence      uint64 // Stored events cut short by a self-referencing chain
	UnknownWorkerRemoved uint64 // RemoveWorker calls for a worker with no ranks here

	Expired uint64 // approximate mode: entries dropped because their TTL passed
	Pruned  uint64 // approximate mode: entries dropped to bring the tree under its size bound
}

// Add accumulates o into c (used to aggregate tiers).
func (c *Counters) Add(o Counters) {
	c.EventsApplied += o.EventsApplied
	c.StoredBlocks += o.StoredBlocks
	c.RemovedBlocks += o.RemovedBlocks
	c.CascadeRemoved += o.CascadeRemoved
	c.Cleared += o.Cleared
	c.ClearedBlocks += o.ClearedBlocks
	c.WorkersRemoved += o.WorkersRemoved
	c.RemovedByWorker += o.RemovedByWorker
	c.ParentNotFound += o.ParentNotFound
	c.DuplicateStore += o.DuplicateStore
	c.Rekeyed += o.Rekeyed
	c.Moved += o.Moved
	c.RemoveUnknown += o.RemoveUnknown
	c.InvalidEvent += o.InvalidEvent
	c.InvalidSequence += o.InvalidSequence
	c.UnknownWorkerRemoved += o.UnknownWorkerRemoved
	c.Expired += o.Expired
	c.Pruned += o.Pruned
}

// Map returns the counters keyed by snake_case name, the form metrics and
// introspection replies use.
func (c Counters) Map() map[string]uint64 {
	return map[string]uint64{
		"events_applied":         c.EventsApplied,
		"stored_blocks":          c.StoredBlocks,
		"removed_blocks":         c.RemovedBlocks,
		"cascade_removed":        c.CascadeRemoved,
		"cleared":                c.Cleared,
		"cleared_blocks":         c.ClearedBlocks,
		"workers_removed":        c.WorkersRemoved,
		"removed_by_worker":      c.RemovedByWorker,
		"parent_not_found":       c.ParentNotFound,
		"duplicate_store":        c.DuplicateStore,
		"rekeyed":                c.Rekeyed,
		"moved":                  c.Moved,
		"remove_unknown":         c.RemoveUnknown,
		"invalid_event":          c.InvalidEvent,
		"invalid_sequence":       c.InvalidSequence,
		"unknown_worker_removed": c.UnknownWorkerRemoved,
		"expired":                c.Expired,
		"pruned":                 c.Pruned,
	}
}
