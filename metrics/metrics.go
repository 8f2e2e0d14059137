// Package metrics defines the router's Prometheus metrics (prefix
// kvrouter_) on a private registry. Hot-path values are pushed through the
// actors.Observer interface; state that lives inside actors (indexed
// blocks, per-worker load, event counters) is pulled at scrape time by
// collectors, so scrapes cost nothing between them.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Router holds the metrics of one replica.
type Router struct {
	Registry *prometheus.Registry

	decisionLatency *prometheus.HistogramVec
	decisions       *prometheus.CounterVec
	overlapBlocks   prometheus.Histogram
	hitRate         prometheus.Histogram
	degraded        *prometheus.CounterVec
	disagg          *prometheus.CounterVec
	closeCalls      prometheus.Counter
	explained       prometheus.Counter
	eventsApplied   *prometheus.CounterVec
	eventsDropped   *prometheus.CounterVec
	shardRestarts   *prometheus.CounterVec
	workerRejected  *prometheus.CounterVec
	strideMismatch  prometheus.Counter
	backlogDropped  *prometheus.CounterVec
	queueDepth      prometheus.Gauge
	sharedHitRate   prometheus.Histogram
	sharedBeyond    prometheus.Histogram
	sessionEvents   *prometheus.CounterVec
	sessionMoves    *prometheus.CounterVec
	sessions        prometheus.Gauge
	admission       *prometheus.CounterVec
	expired         *prometheus.CounterVec
	HTTPRequests    *prometheus.CounterVec
	GRPCRequests    *prometheus.CounterVec
	ProxyRequests   *prometheus.CounterVec
	Migrations      *prometheus.CounterVec
	ProxyTTFT       prometheus.Histogram
	PromptsRefused  *prometheus.CounterVec
	BodiesRefused   *prometheus.CounterVec
	// EPPRequests and EPPAnswers count the gateway endpoint picker's
	// requests by outcome and its answers by how they ended (eppapi).
	EPPRequests *prometheus.CounterVec
	EPPAnswers  *prometheus.CounterVec
	// Parity is the live cache-parity set (metrics/parity.go).
	Parity *Parity
	// connsRefused counts connections refused or closed by the fair-slot
	// guards (metrics/conns.go).
	connsRefused *prometheus.CounterVec
	// Links are the reconnect metrics of outgoing links (metrics/links.go).
	Links *Links
	// Tokenize bounds concurrent tokenization (metrics/tokenize.go).
	Tokenize *Tokenize
}

// New registers the metrics on a fresh registry (plus Go and process
// collectors).
func New() *Router {
	reg := prometheus.NewRegistry()
	m := &Router{
		Registry: reg,
		decisionLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kvrouter_decision_duration_seconds", Help: "Routing decision latency by phase: hash (the prompt's block hashes), score (index lookups and load), select (the cost and the choice), total (from arrival at the scheduler to the answer, queueing included). A total far above the sum of the others means requests wait in the queue or the replica is CPU starved.",
			Buckets: prometheus.ExponentialBuckets(5e-6, 2, 18),
		}, []string{"phase"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_decisions_total", Help: "Routing decisions by outcome: routed (tracked until /free), query (update_states false: nothing tracked), queued (every eligible worker over the queue threshold; decided later), overloaded (429: the queue is full), no_worker (503: no eligible worker: none registered, all unhealthy, draining or excluded), bad_request (400), cancelled (the client left while queued), retried (a call with the request_id and prompt of a request still active here: answered with its recorded decision, nothing counted twice). Rising no_worker or overloaded means the fleet is too small or down.",
		}, []string{"outcome"}),
		overlapBlocks: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvrouter_decision_overlap_blocks", Help: "Cached prefix blocks (per the index) on the worker chosen for each routed request; multiply by block-size for tokens. Near 0 for a shared-prefix workload means KV events are not arriving (see kvrouter_kv_events_applied_total).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		hitRate: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvrouter_decision_kv_hit_rate", Help: "Predicted cache hit rate (overlap blocks / prompt blocks) of routed requests.",
			Buckets: prometheus.LinearBuckets(0, 0.1, 11),
		}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_decisions_degraded_total", Help: "Decisions made without every shard's or the load tracker's reply within decision-timeout, by reason (shard_timeout, load_timeout): routed on partial information. A steady rate means the replica is CPU starved or decision-timeout is too short.",
		}, []string{"reason"}),
		disagg: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_disaggregation_decisions_total",
			Help: "Decisions in a disaggregated fleet by prefill path: remote (prefill pool, KV transfer) or local (short_prompt: max_local_prefill_length; no_prefill_worker; same_rank).",
		}, []string{"path"}),
		closeCalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_decisions_close_total",
			Help: "Decisions whose runner-up's cost was within noise of the winner's: within 1% of the runner-up's cost, or tied (decide.CloseMargin). Counted for every scored decision, explained or not; a large share against kvrouter_decisions_total means the cost barely separates the ranks, so loads and overlaps a publication old can flip the choice (docs/receipts.md).",
		}),
		explained: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_decisions_explained_total",
			Help: "Decisions that built a route receipt: asked for (x-kvrouter-explain, explain), sampled (--decision-sample) or debug logging. Each is kept in the replica's ring (GET /decisions/{request_id}).",
		}),
		eventsApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_kv_events_applied_total", Help: "KV events applied to the index, by kind (stored, removed, cleared). Flat while engines serve traffic means no events arrive: check the engines' KV-event flags and kvrouter_kv_event_messages_total or kvrouter_zmq_messages_total.",
		}, []string{"kind"}),
		eventsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_kv_events_dropped_total", Help: "KV events not applied (or partly applied), by reason: parent_not_found (a Stored event whose parent is unknown: events lost or reordered), invalid_event, invalid_block_sequence, unknown_rank (a rank the worker does not have), unregistered_worker_expired (held too long for a worker that never registered), prediction_* (approximate mode). Each drop is logged (rate-limited) with the worker and rank; refused events degrade the rank's index trust.",
		}, []string{"reason"}),
		shardRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_shard_restarts_total", Help: "Indexer shard restarts after a panic; intact=false means the shard was reset.",
		}, []string{"intact"}),
		workerRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_workers_rejected_total", Help: "Worker registrations refused, by reason: block_size_mismatch (the engine's block size is not --block-size), registry_full (max-workers), url_* (the worker URL fails worker-url-allow), zmq_endpoint_* (the KV-event endpoint fails it). The refused worker gets no traffic; the log names it.",
		}, []string{"reason"}),
		strideMismatch: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvrouter_active_sequence_stride_mismatches_total",
			Help: "Peer adds dropped because the peer samples sequence hashes with another router-active-sequence-stride.",
		}),
		backlogDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_backlog_dropped_total",
			Help: "Messages dropped because an actor's backlog was at its bound (queue=shard: KV events after back-pressure; queue=replication: peers' gossip, repaired by anti-entropy).",
		}, []string{"queue"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_queue_depth", Help: "Requests waiting because every eligible worker is over the queue threshold.",
		}),
		sharedHitRate: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvrouter_shared_cache_hit_rate", Help: "Shared-tier prefix blocks / prompt blocks of routed requests (Dynamo's router_shared_cache_hit_rate), when the shared tier is in use.",
			Buckets: prometheus.LinearBuckets(0, 0.1, 11),
		}),
		sharedBeyond: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvrouter_shared_cache_beyond_blocks", Help: "Shared-tier blocks beyond the chosen worker's rounded effective overlap (Dynamo's router_shared_cache_beyond_blocks): blocks it loads from the shared cache.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		sessionEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_session_events_total",
			Help: "Sticky-session table changes on this replica: bound (a first request), ended, evicted (over max-sessions), expired (session-ttl idle), rejected (a peer's invalid entry).",
		}, []string{"event"}),
		sessionMoves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_session_moves_total",
			Help: "Sticky sessions moved off their rank by this replica, by reason (gone: unregistered, unhealthy or draining; busy: over the busy or queue threshold; excluded: left out by the request's constraints or a proxy retry).",
		}, []string{"reason"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kvrouter_sessions", Help: "Entries in the sticky-session table (tombstones of ended sessions included).",
		}),
		admission: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_admission_refused_total",
			Help: "Routes refused with 429 at an active-request bound, by reason (active_requests: the replica's max-active-requests; client_active_requests: the calling client's max-active-requests-per-client).",
		}, []string{"reason"}),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_requests_expired_total",
			Help: "Requests freed without a free, by reason (lease: a request this replica routed whose lease ran out, freed on every replica; stale: older than stale-request-expiry).",
		}, []string{"reason"}),
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_http_requests_total", Help: "HTTP API requests by endpoint (route, free, prefill_done, overlap_scores, potential_loads, workers, sessions, models, completions, chat_completions, parity, healthz, readyz) and status code. A rising 4xx share is clients sending what the router refuses (see kvrouter_http_bodies_refused_total and the error bodies); 5xx other than 503 is a bug.",
		}, []string{"endpoint", "code"}),
		GRPCRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_grpc_requests_total",
			Help: "gRPC API calls by method (Lifecycle/Route, Lifecycle/Free, Lifecycle/PrefillDone for the calls a Lifecycle stream carries) and status code (OK, InvalidArgument, ...).",
		}, []string{"method", "code"}),
		ProxyRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_proxy_requests_total", Help: "Proxied completions (/v1/completions, /v1/chat/completions) by outcome: ok, worker_error (the engine answered non-200, relayed), client_gone (the client left before the end), worker_stream_error (the engine's stream broke), worker_unreachable (502 after a retry on another worker), route_error (no worker could be chosen), decode_failed (disaggregated: the decode hop failed), bad_input (400), loop (508: the request had already passed a router).",
		}, []string{"outcome"}),
		Migrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_migrations_total",
			Help: "Proxied requests whose engine failed, by reason (unreachable: no connection or no answer before any text; engine_error: a 5xx before any text; stream_cut: the stream ended early after some text; decode_failed: the decode hop of a disaggregated request) and outcome (migrated: sent again to another worker, a stream continued from the text already sent; limit: migration-limit reached; unsupported: the request cannot be continued, e.g. n > 1 or a token-id prompt whose engine sends no token ids; no_worker: no other worker to take it).",
		}, []string{"reason", "outcome"}),
		ProxyTTFT: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kvrouter_proxy_time_to_first_token_seconds", Help: "Time from a proxied completion's arrival to the engine's first answer byte (routing, queueing and prefill). High values with a low kvrouter_decision_kv_hit_rate mean prompts are prefilled from scratch.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16),
		}),
		PromptsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_prompts_refused_total",
			Help: "Text and chat prompts refused with a 4xx before routing, by reason (length: over max-prompt-tokens by the text's length, before any tokenization; tokens: tokenization stopped once the count passed max-prompt-tokens; unknown_model; messages: messages the engine's preprocessing refuses; template: the chat template failed; no_chat_template; no_tokenizer; input: another client error).",
		}, []string{"reason"}),
		BodiesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_http_bodies_refused_total",
			Help: "Request bodies of the router's own HTTP API (route, free, prefill_done, overlap_scores, potential_loads, workers) refused with a 4xx before they were acted on, by endpoint and reason: unknown_field (a key the endpoint does not read, often a typo or a field of another version), malformed (not JSON, a wrong type, data after the object), empty, too_large (over max-body-bytes), read (the body could not be read). A rising count means a client sends requests the router does not understand: the 400's error names the field.",
		}, []string{"endpoint", "reason"}),
		EPPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_epp_requests_total",
			Help: "Requests the gateway asked the endpoint picker (--epp-addr) about, by outcome: routed (an endpoint was named), header_only (no body: any endpoint was named), or the HTTP status of the immediate response that refused it (400 malformed body, 404 unknown model or path, 413 body over max-body-bytes, 429 queue full, 503 no eligible endpoint, 500 unsupported body mode, ...).",
		}, []string{"outcome"}),
		EPPAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvrouter_epp_answers_total",
			Help: "Routed requests the endpoint picker freed, by how the answer ended: complete (end of stream or trailers), worker_error (a status other than 200), cut (the gateway closed the stream or it broke before the end), rerouted (the gateway served a fallback endpoint: the request was recorded there instead).",
		}, []string{"end"}),
	}
	reg.MustRegister(m.decisionLatency, m.decisions, m.overlapBlocks, m.hitRate, m.degraded, m.disagg, m.closeCalls, m.explained,
		m.eventsApplied, m.eventsDropped, m.shardRestarts, m.workerRejected, m.strideMismatch, m.backlogDropped, m.queueDepth,
		m.sharedHitRate, m.sharedBeyond,
		m.sessionEvents, m.sessionMoves, m.sessions, m.admission, m.expired,
		m.HTTPRequests, m.GRPCRequests, m.ProxyRequests, m.Migrations, m.ProxyTTFT, m.PromptsRefused, m.BodiesRefused,
		m.EPPRequests, m.EPPAnswers,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Parity = newParity()
	reg.MustRegister(m.Parity.collectors()...)
	m.connsRefused = newConnsRefused()
	reg.MustRegister(m.connsRefused)
	m.Links = newLinks(reg)
	m.Tokenize = newTokenize(reg)
	return m
}

// The actors.Observer implementation.

func (m *Router) DecisionPhase(phase string, d time.Duration) {
	m.decisionLatency.WithLabelValues(phase).Observe(d.Seconds())
}

func (m *Router) Decision(outcome string, overlap uint32, requestBlocks int) {
	m.decisions.WithLabelValues(outcome).Inc()
	if outcome == "routed" {
		m.overlapBlocks.Observe(float64(overlap))
		if requestBlocks > 0 {
			m.hitRate.Observe(float64(overlap) / float64(requestBlocks))
		}
	}
}

func (m *Router) DecisionDegraded(reason string) { m.degraded.WithLabelValues(reason).Inc() }
func (m *Router) EventApplied(kind string)       { m.eventsApplied.WithLabelValues(kind).Inc() }
func (m *Router) EventDropped(reason string)     { m.eventsDropped.WithLabelValues(reason).Inc() }
func (m *Router) WorkerRejected(reason string)   { m.workerRejected.WithLabelValues(reason).Inc() }
func (m *Router) StrideMismatch()                { m.strideMismatch.Inc() }
func (m *Router) BacklogDropped(queue string)    { m.backlogDropped.WithLabelValues(queue).Inc() }
func (m *Router) QueueDepth(n int)               { m.queueDepth.Set(float64(n)) }
func (m *Router) SessionEvent(event string, n int) {
	m.sessionEvents.WithLabelValues(event).Add(float64(n))
}
func (m *Router) SessionMoved(reason string) { m.sessionMoves.WithLabelValues(reason).Inc() }
func (m *Router) SessionCount(n int)         { m.sessions.Set(float64(n)) }
func (m *Router) AdmissionRefused(reason string) {
	m.admission.WithLabelValues(reason).Inc()
}
func (m *Router) RequestsExpired(reason string, n int) {
	m.expired.WithLabelValues(reason).Add(float64(n))
}

func (m *Router) Disaggregation(path string) { m.disagg.WithLabelValues(path).Inc() }

// DecisionClose counts a decision within noise.
func (m *Router) DecisionClose() { m.closeCalls.Inc() }

// DecisionExplained counts a decision that built a route receipt.
func (m *Router) DecisionExplained() { m.explained.Inc() }

func (m *Router) SharedCache(shared, beyond uint32, requestBlocks int) {
	if requestBlocks > 0 {
		m.sharedHitRate.Observe(float64(shared) / float64(requestBlocks))
	}
	m.sharedBeyond.Observe(float64(beyond))
}

func (m *Router) ShardRestarted(_ uint32, intact bool) {
	if intact {
		m.shardRestarts.WithLabelValues("true").Inc()
	} else {
		m.shardRestarts.WithLabelValues("false").Inc()
	}
}
