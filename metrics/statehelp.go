package metrics

// stateHelp is the help text of the counters and gauges the components
// report through State (kvrouter_<name>_total{source} and
// kvrouter_<name>): what each counts, when it moves, and what to do when
// it does. Keys are the State names; the docs generator fails on a name
// missing here.
var stateHelp = map[string]string{
	// ---- client saturation and leases ----
	"clients_active":             "Clients (bearer tokens, else addresses) holding at least one of the requests this replica routed.",
	"client_top_active_requests": "Active requests of the client holding the most of those this replica routed.",
	"client_top_share":           "The top client's share (0-1) of the active requests this replica routed.",
	"client_saturated":           "1 while one client holds max-active-requests-per-client active requests (its further routes get 429; others are served).",
	"cluster_expected_members":   "Live cluster members (this replica included) the readiness rule wants (--cluster-min-members; by default 2 when a seed names another replica).",
	"cluster_membership_ok":      "1 while the cluster has the expected members; 0 makes a replica not yet ready unready, and a key mismatch makes any replica unready.",
	"cluster_key_mismatches":     "Gossip no key of this replica decrypts (memberlist: no installed keys could decrypt): a peer's message refused here, or this replica's join refused by a seed. A wrong --cluster-key-file here or there.",

	// ---- readiness and the registry ----
	"ready":              "1 when this replica answers /readyz with 200: NATS ingestion is up and, on the first start, the KV-event replay is applied and the cluster peers are synced; 0 otherwise, and a load balancer should send it nothing (GET /readyz says why).",
	"registered_workers": "Workers in this replica's registry (static, heartbeat, discovered and POST /workers alike). A drop without a deployment change means heartbeats stopped (heartbeat-timeout) or discovery lost the engines.",
	"tracked_requests":   "Requests this replica routed with update_states and not yet freed. It should follow the in-flight load: a steady climb means clients do not call POST /free (or the gRPC Free), and the load stays counted until stale-request-expiry.",

	// ---- NATS ingestion (source: the event mode, or nats) ----
	"nats_connected":          "1 while this replica's NATS connection is up, 0 while it reconnects; without JetStream the KV events published meanwhile are lost to it (event-id gaps).",
	"kv_event_messages":       "NATS messages of KV events received (source: the event mode, core or jetstream). Flat while engines serve traffic means the engines do not publish to the subject this replica reads.",
	"kv_events_received":      "KV events decoded from those messages and handed to the index (source: the event mode). Compare with kvrouter_kv_events_applied_total: the difference is dropped events (kvrouter_kv_events_dropped_total).",
	"kv_event_id_gaps":        "Event ids skipped per worker rank (at most the id-gap bound per event): events this replica never received, so its index may lack blocks. A rising count puts the rank in degraded trust; check the NATS link or JetStream retention.",
	"kv_event_id_reordered":   "Events whose id was not above the rank's last one, or far beyond it: an engine restart or a replay. A burst at an engine restart is expected; a steady rate means two publishers share a worker id.",
	"kv_event_stream_gaps":    "JetStream messages this replica never read because a snapshot purged them first: its index lacks their effect until the workers store those blocks again. Raise kv-events-max-msgs / kv-events-max-bytes or the snapshot threshold if this moves.",
	"kv_event_unknown_fields": "Fields in applied KV-event messages the decoder does not use: a newer engine's additions. Harmless while kvrouter_kv_events_malformed_total stays flat; check docs/compatibility.md for the engine version.",
	"kv_events_malformed":     "KV-event messages dropped whole because they failed to decode, by reason (source: json, protobuf, envelope: a Dynamo event-plane envelope that is not exactly one RouterEvents). A publisher with another encoding or version; the rate-limited WARN names the subject.",
	"heartbeats_received":     "Worker heartbeats received over NATS. Each registered heartbeat worker sends one per interval; a drop means workers stopped announcing and will be removed after heartbeat-timeout.",
	"heartbeats_malformed":    "Worker heartbeats dropped because they failed to decode; the worker they came from is not (re)registered by them. The rate-limited WARN names the subject.",

	// ---- ZMQ ingestion (vLLM / SGLang KV-event sockets) ----
	"zmq_messages":       "KV-event batches received live over the engines' ZMQ PUB sockets. Flat while engines serve traffic means the subscription is not connected (see kvrouter_zmq_connections_total) or the engines publish nothing.",
	"zmq_events":         "Raw engine events decoded from ZMQ batches (live and replayed).",
	"zmq_stored_blocks":  "Blocks in BlockStored events delivered to the index from ZMQ.",
	"zmq_malformed":      "ZMQ frames or events dropped as malformed (an engine of another version or event format). The rate-limited WARN names the endpoint and reason; docs/compatibility.md lists the supported engine versions.",
	"zmq_duplicates":     "Live ZMQ batches skipped because a replay had already applied them; expected after each replay.",
	"zmq_replays":        "Replay requests the engines' replay sockets answered, sent to fill a sequence gap.",
	"zmq_replay_errors":  "Replay requests that failed or timed out; the rank's gap stays open and its index trust turns untrusted. Check the engine's replay endpoint (replay port) is reachable.",
	"zmq_replayed":       "ZMQ batches applied from replays (gaps filled).",
	"zmq_lost":           "ZMQ sequence numbers neither received nor replayed: batches whose blocks the index lacks. Moves with kvrouter_zmq_replay_errors_total or when the engine's replay buffer no longer holds them.",
	"zmq_restarts":       "Engine restarts detected on ZMQ (the sequence went backwards or jumped, or a replay showed a different batch); the rank's index is cleared and rebuilt from new events.",
	"zmq_ref_suppressed": "Stores of a block hash the rank already holds, and removals of one of its several copies, kept from the index by the reference counter (vLLM may hold one hash in several blocks; hybrid models publish each hash once per KV cache group). Expected; no action.",
	"zmq_connections":    "ZMQ SUB connections established. More than the engines' ranks means reconnects: an engine restarting or the network dropping the link.",

	// ---- the index (source: index; snapshots: jetstream) ----
	"index_events_applied":         "KV events the index applied without error.",
	"index_stored_blocks":          "(rank, block) entries added to the index by Stored events.",
	"index_removed_blocks":         "Index entries removed because a Removed event named them.",
	"index_cascade_removed":        "Index entries removed because an ancestor block of the same rank was removed (a prefix without its parent cannot match).",
	"index_cleared":                "Cleared (AllBlocksCleared) events applied: an engine reset its cache, including the clear the ZMQ subscriber emits when an engine restarts.",
	"index_cleared_blocks":         "Index entries removed by Cleared events.",
	"index_workers_removed":        "Workers removed from the index (unregistered, expired heartbeats, deleted with DELETE /workers).",
	"index_removed_by_worker":      "Index entries removed with their worker.",
	"index_parent_not_found":       "Stored events skipped because their parent block is unknown: events arrived out of order or some were lost. The rank's trust degrades; a steady rate means lost events (see kvrouter_kv_event_id_gaps_total, kvrouter_zmq_lost_total).",
	"index_duplicate_store":        "Blocks stored again with the same engine hash (no change); expected when several replicas or a replay repeat events.",
	"index_rekeyed":                "Blocks stored again under a new engine hash (the engine re-announced a block it holds).",
	"index_moved":                  "Engine hashes stored again for a different block (the engine reused a hash); the index follows the latest store.",
	"index_remove_unknown":         "Hashes in Removed events the rank did not hold in the index: removals of blocks whose Stored event this replica never applied. Harmless on its own (the index cannot claim a block it lacks).",
	"index_invalid_event":          "KV events the index refused by shape (a Stored event without blocks, an unknown kind or tier). An engine of an unsupported version; docs/compatibility.md.",
	"index_invalid_sequence":       "Stored events cut short because their block chain referred to itself (an engine bug or a corrupted message).",
	"index_unknown_worker_removed": "Worker removals for a worker the index held no ranks of (removed before any event arrived); no action.",
	"index_expired":                "Approximate mode (--use-kv-events=false): predicted entries dropped because router-ttl-secs passed.",
	"index_pruned":                 "Approximate mode: predicted entries dropped to bring the tree under router-max-tree-size.",
	"index_shard_resets":           "Indexer shards reset empty because their index failed its checks after a panic; the workers' blocks come back as they are stored again. Any increase is a bug worth reporting with the ERROR log line.",
	"index_digests":                "Index digests computed (GET /workers?digest=1, the gRPC Workers call with index_digest); each walks the whole index while the shards answer no lookup, so poll it rarely.",
	"index_held_blocks":            "Blocks of KV events held right now, over all shards, because their worker is not registered yet (bounded by unregistered-event-hold-blocks and -age). Events beyond the bound are dropped (kvrouter_kv_events_dropped_total).",
	"index_snapshots":              "Index snapshots this replica wrote to the JetStream object store (it purges the event stream after each). Only one replica snapshots at a time; none means the stream is under router-snapshot-threshold.",
	"index_trust_to_exact":         "Worker ranks whose index trust returned to exact, by what restored it (source: replay_complete, cleared, clean_parity, ...; docs/index-trust.md).",
	"index_trust_to_degraded":      "Worker ranks whose index trust became degraded, by cause (source: gap_open, refused_events, parity_drift, ...). Their decisions still use the index; see docs/index-trust.md for each cause.",
	"index_trust_to_untrusted":     "Worker ranks whose index trust became untrusted, by cause (source: gap_unrepaired, replay_failed, stale_stream, parity_drift, ...). Their decisions use predicted blocks instead of events until a replay, a clear or a clean parity window; see docs/index-trust.md.",

	// ---- the cluster: gossip (source: memberlist) ----
	"cluster_members":            "Alive cluster members, this replica included. Less than the replicas you run means a partition or replicas that failed to join (cluster-join).",
	"cluster_keys":               "Keys in the gossip keyring (0: unauthenticated gossip). Two during a key rotation, one otherwise.",
	"cluster_primary_key_id":     "The primary gossip key's id (the first 8 hex digits of its SHA-256, as a number): every replica shows the same value once a rotation has reached it.",
	"cluster_health_score":       "Lifeguard awareness: 0 when this replica keeps up with its probes; higher when it is slow (CPU starved, GC pauses), which slows its probes to avoid false deaths.",
	"gossip_events_published":    "Local active-sequence (load) events accepted for gossip to the other replicas.",
	"gossip_events_dropped":      "Local events refused for gossip because the outgoing queue was full; peers repair the difference by anti-entropy. A steady rate means gossip cannot keep up (raise cluster-batch-max-events or check the network).",
	"gossip_events_sent":         "Events sent to the peers in batches (each counted once, not per peer).",
	"gossip_batches":             "Gossip batches flushed (one per cluster-batch-interval while events wait).",
	"gossip_bytes_sent":          "Encoded bytes of gossip messages sent to all peers.",
	"gossip_send_errors":         "Gossip sends that failed (a peer unreachable or its stream closed); the peer is repaired by anti-entropy once reachable.",
	"gossip_events_received":     "Peers' events applied to this replica's view of the fleet load.",
	"gossip_events_lost":         "Peers' events given up on after a sequence gap stayed open: their effect comes back with the next anti-entropy repair (kvrouter_gossip_repairs_total).",
	"gossip_digest_mismatches":   "Peers' state digests that disagreed with this replica's view of their load; each asks for a repair.",
	"gossip_repairs":             "Full peer states applied after a digest mismatch or a lost event (anti-entropy). Occasional repairs are normal; a steady rate means events are lost (see kvrouter_gossip_events_lost_total).",
	"gossip_origins_dropped":     "Peers whose load was dropped from this replica's view because they left or died.",
	"gossip_malformed":           "Gossip messages or events that failed to decode or validate (a replica of another version, or a corrupted frame).",
	"gossip_inbox_drops":         "Peers' gossip messages dropped because this replica's apply loop was behind; repaired by anti-entropy. A steady rate means the replica is CPU starved.",
	"gossip_streams_refused":     "Inbound gossip streams refused at the handshake (TLS, a bad hello, another cluster-label, not a member, a bad signature): a replica with another key or label, or someone probing the port.",
	"gossip_streams_over_limit":  "Inbound gossip connections closed at once because the inbound stream or handshake slots were taken.",
	"gossip_stream_timeouts":     "Inbound gossip streams closed for idling or for a frame that took too long.",
	"gossip_foreign_frames":      "Gossip frames dropped for speaking for another replica than the one that sent them (a misbehaving or spoofing member).",
	"gossip_unauthenticated":     "Gossip messages dropped as unsigned or not signed by a current member: a replica with a stale key, or someone injecting messages.",
	"gossip_key_changes":         "Gossip key sets applied after start (key rotations read from cluster-key-file).",
	"gossip_key_reload_errors":   "Reads or parses of cluster-key-file that failed; the keys in use stay. Fix the file (base64 keys, one a line).",
	"gossip_ack_waits":           "Acknowledgements that waited for their gossip to be handed to every live peer, so that a replica dying after it acknowledged cannot take the change along: a free or prefill_done over HTTP or unary gRPC, a group of them on a Lifecycle stream, the end of a proxied answer (those whose gossip had left already are not counted). A wait is one write when gossip is quiet, about a millisecond more under load.",
	"gossip_ack_given_up":        "Acknowledgements that stopped waiting for a peer, by reason (source: timeout: the peer's sender did not take the gossip within four batch intervals and 20 ms; peer_queue_full: the peer's queue dropped it; peer_stalled: the peer timed out before and has not taken anything since, so it is not waited for). The change reaches that peer when its sender catches up; one its queue dropped does not (the request stays counted there until its lease or stale-request-expiry). A steady rate means a peer is slow or unreachable.",
	"registry_digest_mismatches": "With --discover: peers' digests of their discovered fleet that differed from this replica's (a count since start). Brief differences follow engine changes; see kvrouter_registry_diverged_peers for lasting ones.",
	"registry_diverged_peers":    "With --discover: peers whose discovered fleet has differed from this replica's for longer than the divergence bound, so replicas route over different fleets. Compare GET /workers on both and the discovery errors.",

	// ---- the cluster: failure detector (source: memberlist) ----
	"cluster_suspicions":        "Live peers this replica marked suspect (a probe went unanswered).",
	"cluster_refutations":       "Suspicions or deaths of this replica that it refuted: others thought it dead. A steady rate means this replica is too slow to answer probes (CPU, GC) or its network drops packets.",
	"cluster_deaths":            "Members this replica marked dead or saw leave (graceful leaves, its own included).",
	"cluster_false_deaths":      "Peers marked dead or gone that came back with the same boot key: the failure detector was wrong. Raise the probe timeouts if this moves outside restarts.",
	"cluster_degraded_probes":   "Probes slowed down because of this replica's own poor health (Lifeguard awareness).",
	"cluster_rejected_messages": "Inbound memberlist messages rejected (undecryptable, another label, undecodable): a wrong cluster key, a foreign cluster on the same port, or a port scan.",

	// ---- discovery (source: discovery, or the error reason) ----
	"discovered_engines":   "Engines the --discover sources see now (all sources together).",
	"discovery_updates":    "Full views received from the discovery sources (DNS answers, Kubernetes informer updates).",
	"discovery_registered": "Engines discovery registered (new, or back from not ready).",
	"discovery_drained":    "Engines discovery drained because they left their source (pod deleted, DNS record gone).",
	"discovery_not_ready":  "Engines discovery marked not ready (the pod lost its Ready condition).",
	"discovery_rejected":   "Discovered engines the router refused to register (worker-url-allow policy, block size, max-workers); the WARN names the engine.",
	"discovery_errors":     "Discovery failures by reason (source: dns_unreachable, dns_error, forbidden, pool_not_found, api_unavailable, bad_record, kube_error); the engines last seen stay registered. forbidden means the service account lacks RBAC (docs/operations.md).",

	// ---- engine polling (source: enginepoll, or the transition or error) ----
	"polled_engines_healthy": "Polled engines whose last /health answer was healthy.",
	"engine_polls":           "Engine polls done (/health and /metrics, every engine-poll-interval).",
	"engine_health_failures": "Engine /health checks that failed; the failure threshold in a row marks the engine unhealthy (no new requests until it recovers).",
	"engine_transitions":     "Engine state changes seen by polling (source: unhealthy, healthy, busy, idle). Frequent busy/idle flips mean the engines run at their waiting threshold.",
	"engine_metrics_errors":  "Engine /metrics polls that failed, by reason (source: unreachable, timeout, status, malformed, no_load_metrics, too_large); the engine's reported load is not refreshed. no_load_metrics: the engine exports none of the load series the poller reads (docs/compatibility.md).",
}

// stateCounterHelp is a State counter's help (name without kvrouter_ and
// _total).
func stateCounterHelp(name string) string {
	if h, ok := stateHelp[name]; ok {
		return h
	}
	return "Counter " + name + " by source."
}

// stateGaugeHelp is a State gauge's help.
func stateGaugeHelp(name string) string {
	if h, ok := stateHelp[name]; ok {
		return h
	}
	return "Gauge " + name + "."
}

// StateHelp reports whether a State name has help text of its own.
func StateHelp(name string) bool {
	_, ok := stateHelp[name]
	return ok
}
