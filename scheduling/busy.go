package scheduling

// EngineLoad is what an engine reports about itself on /metrics (vLLM's
// num_requests_running / num_requests_waiting / kv_cache_usage_perc,
// SGLang's num_running_reqs / num_queue_reqs / token_usage), for one dp
// rank. It counts every client's requests, not only this router's.
type EngineLoad struct {
	Running float64
	Waiting float64
	// KVUsage is the fraction of KV blocks in use, 0..1; HasKVUsage says
	// whether the engine reported it.
	KVUsage    float64
	HasKVUsage bool
}

// BusyThresholds are Dynamo's busy-detection thresholds applied to what
// the engines report. A negative threshold is disabled (Dynamo's default
// leaves busy detection off until a threshold is set).
type BusyThresholds struct {
	// KVUsage is Dynamo's active_decode_blocks_threshold: busy when the
	// fraction of KV blocks in use exceeds it (0..1).
	KVUsage float64
	// Waiting: busy when the engine's own waiting queue holds more
	// requests than this.
	Waiting float64
}

// Enabled reports whether any threshold is set.
func (t BusyThresholds) Enabled() bool { return t.KVUsage >= 0 || t.Waiting >= 0 }

// EngineBusy is the busy rule: a rank whose engine reports more waiting
// requests than Waiting, or a larger KV usage than KVUsage, is busy and
// takes no new requests until it drops back (Dynamo marks such workers
// busy and leaves them out of the candidates; when every worker is busy,
// the request is refused).
func EngineBusy(l EngineLoad, t BusyThresholds) bool {
	if t.Waiting >= 0 && l.Waiting > t.Waiting {
		return true
	}
	return t.KVUsage >= 0 && l.HasKVUsage && l.KVUsage > t.KVUsage
}
