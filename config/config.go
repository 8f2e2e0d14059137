// Package config is the one place the router's settings are defined. Each
// field of Config is a kebab-case flag, an environment variable
// KVROUTER_<UPPER_SNAKE> and a key of the YAML file named by --config;
// flags win over the environment, the environment over the file, the file
// over the defaults. Its group tag places it under a heading of
// `kvrouter serve -h` and docs/configuration.md (groups.go). Knobs that Dynamo exposes keep Dynamo's name (the flag
// is its kebab-case form) and default.
package config

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/kvrouter/kvrouter/actors"
	"github.com/kvrouter/kvrouter/cluster"
	"github.com/kvrouter/kvrouter/discovery"
	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/natsbus"
	"github.com/kvrouter/kvrouter/netpolicy"
	"github.com/kvrouter/kvrouter/parity"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sequence"
	"github.com/kvrouter/kvrouter/sessions"
	"github.com/kvrouter/kvrouter/trust"
)

// Config is every setting of one router replica.
type Config struct {
	// ---- process ----
	HTTPAddr        string        `flag:"http-addr" group:"essentials" help:"HTTP listen address for the API, proxy and metrics"`
	DataDir         string        `flag:"data-dir" group:"essentials" help:"directory for the embedded NATS JetStream store (<data-dir>/nats, locked while it runs): KV-event stream and index snapshots; the same path on every start keeps the index across restarts, whatever the replica id"`
	LogLevel        string        `flag:"log-level" group:"essentials" help:"debug, info, warn or error"`
	LogFormat       string        `flag:"log-format" group:"essentials" help:"text (key=value lines) or json (one JSON object per line, log/slog's JSON handler)"`
	ConfigFile      string        `flag:"config" group:"essentials" help:"YAML file of settings whose keys are these flags' names (block-size: 16, served-model: [a, b]); flags win over the environment, the environment over the file, the file over the defaults; an unknown key or a value of the wrong type is an error"`
	ReplicaID       string        `flag:"replica-id" group:"essentials" help:"this replica's id in the cluster (default: hostname + boot nonce)"`
	ShutdownTimeout time.Duration `flag:"shutdown-timeout" group:"tuning" help:"how long to drain HTTP and actors on SIGTERM"`
	MaxBodyBytes    int64         `flag:"max-body-bytes" group:"limits" help:"largest accepted HTTP request body (413 above)"`
	Proxy           bool          `flag:"proxy" group:"essentials" help:"serve OpenAI-compatible /v1/completions and /v1/chat/completions by routing and forwarding to workers"`
	Pprof           bool          `flag:"pprof" group:"tuning" help:"serve Go profiles under /debug/pprof/ (for operators chasing CPU or memory)"`
	GCPercent       int           `flag:"gc-percent" group:"tuning" help:"Go GC target (GOGC); the live heap is mostly the index and every GC cycle marks all of it: a higher target makes cycles rarer but lets the heap grow to (1 + target/100) times the live heap, which measured worse for lookups over minutes (docs/operations.md, Memory); 0 keeps the runtime's (or GOGC's) setting"`
	ProcsPerCPU     float64       `flag:"procs-per-cpu" group:"tuning" help:"GOMAXPROCS as a multiple of the CPUs the process may use (Go's default GOMAXPROCS, which follows the container's CPU limit), rounded up; the shards and the scheduler then share the CPUs under the kernel's scheduler, which cuts lookup tails while KV events stream in (docs/benchmarks.md, \"Index and KV-event ingest\"); 1 keeps Go's default; GOMAXPROCS in the environment wins"`
	MemoryLimit     string        `flag:"memory-limit" group:"tuning" help:"soft memory limit of the Go runtime (GOMEMLIMIT): bytes with an optional KiB, MiB or GiB suffix; auto = 90% of the container's cgroup memory limit when it has one (the safety net under gc-percent's headroom), none = no limit; GOMEMLIMIT in the environment wins"`

	// ---- models and tokenization (text and chat prompts) ----
	ServedModels             []string `flag:"served-model" group:"essentials" help:"NAME=PATH: serve model NAME, tokenizing its text and chat prompts with the tokenizer at PATH (tokenizer.json, or a model directory with tokenizer.json, tokenizer_config.json and chat_template.jinja); NAME alone uses --tokenizer; repeatable or comma-separated"`
	Tokenizer                string   `flag:"tokenizer" group:"essentials" help:"tokenizer.json or model directory for text and chat prompts; without --served-model the model is served under the directory's name (and is the default for requests without model)"`
	ServedLoRAs              []string `flag:"served-lora" group:"models" help:"ADAPTER=MODEL: a LoRA adapter of served model MODEL: a request naming it uses MODEL's tokenizer and routes with Dynamo's LoRA salt; repeatable or comma-separated"`
	TokenizerMode            string   `flag:"tokenizer-mode" group:"models" help:"router: tokenize in process; engine: ask a worker's POST /tokenize (vLLM's API; cached per identical input), for templates the router cannot render"`
	ChatEngines              []string `flag:"chat-engine" group:"models" help:"MODEL=vllm|sglang: render MODEL's chat requests with that engine's message preprocessing (content null, text-part arrays, tool-call arguments, tools; docs/chat-rendering.md); models not named get vllm; repeatable or comma-separated"`
	TrustRequestChatTemplate bool     `flag:"trust-request-chat-template" group:"security" help:"accept a chat_template in a request (as vLLM's flag of that name); without it such a request gets 400: a template is code the router would run; every render runs under step, size and time limits (docs/tokenization-limits.md)"`

	// ---- live cache parity (docs/parity.md) ----
	Parity                  bool    `flag:"parity" group:"parity" help:"compare every proxied answer's usage (prompt_tokens, prompt_tokens_details.cached_tokens) with the router's token count and predicted cache hit: metrics, status and the automatic switch below; streams get stream_options.include_usage, stripped again for clients that did not ask"`
	ParityWindow            int     `flag:"parity-window" group:"parity" help:"how many of a model's latest router-tokenized proxied requests (and of a worker rank's latest predicted hits) are judged together"`
	ParityMinSamples        int     `flag:"parity-min-samples" group:"parity" help:"requests the window must hold before a model can be switched to engine tokenization"`
	ParityMismatchThreshold float64 `flag:"parity-mismatch-threshold" group:"parity" help:"fraction of a model's window whose engine prompt_tokens differ from the router's count above which the model is switched to engine tokenization (--tokenizer-mode engine for that model only), in [0, 1)"`
	ParityCleanWindow       int     `flag:"parity-clean-window" group:"parity" help:"a switched model goes back to router tokenization after this many consecutive background checks (the router's own count of a served request against the engine's prompt_tokens) match; 0 = only POST /parity/{model}/reset (admin) switches back"`
	ParityAutoSwitch        bool    `flag:"parity-auto-switch" group:"parity" help:"switch a model whose token parity broke to engine tokenization; false = measure, log and export only"`

	// ---- HTTP security and limits ----
	AdminAddr             string        `flag:"admin-addr" group:"security" help:"separate listen address for the admin API (POST/DELETE /workers, /debug/pprof; also GET /workers, probes, metrics); when set, admin routes are served only there"`
	AdminTokenFile        string        `flag:"admin-token-file" group:"security" help:"file of bearer tokens (one per line, at least 16 characters) the admin API requires; without it and without --admin-addr, admin routes answer loopback clients only; re-read when it changes"`
	APITokenFile          string        `flag:"api-token-file" group:"security" help:"file of bearer tokens data-plane clients must send (/route, /free, /prefill_done, /overlap_scores, /potential_loads, GET /workers, /v1/*); an admin token is accepted too; empty = no client token; re-read when it changes"`
	WorkerURLAllow        []string      `flag:"worker-url-allow" group:"security" help:"comma-separated hosts worker URLs and announced ZMQ endpoints may name: private (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, loopback), loopback, any, CIDRs, IPs, host names, *.domain patterns; names not listed must resolve into the allowed CIDRs; link-local and metadata addresses and this router's own listeners are always refused"`
	HTTPReadHeaderTimeout time.Duration `flag:"http-read-header-timeout" group:"limits" help:"longest time to read a request's headers"`
	HTTPReadTimeout       time.Duration `flag:"http-read-timeout" group:"limits" help:"longest time to read a whole request, body included (0 = none)"`
	HTTPWriteTimeout      time.Duration `flag:"http-write-timeout" group:"limits" help:"longest a write to a client may block; renewed as a response progresses, so proxied streams may last longer (0 = none)"`
	HTTPIdleTimeout       time.Duration `flag:"http-idle-timeout" group:"limits" help:"close a keep-alive connection idle this long (keep it above the load balancer's idle timeout)"`
	HTTPMaxConns          int           `flag:"http-max-conns" group:"limits" help:"most client connections open at once on the HTTP listener; more wait in the kernel's accept queue (0 = no cap)"`

	// ---- gRPC API (kvrouter.v1, grpcapi) ----
	GRPCAddr           string `flag:"grpc-addr" group:"essentials" help:"listen address of the gRPC routing API (kvrouter.v1.Router, grpc.health.v1, reflection); empty = off. Same client token (--api-token-file, as authorization: Bearer metadata), message limit (--max-body-bytes) and idle timeout (--http-idle-timeout) as HTTP"`
	GRPCMaxConns       int    `flag:"grpc-max-conns" group:"limits" help:"most client connections open at once on the gRPC listener; more wait in the kernel's accept queue (0 = no cap)"`
	GRPCMaxStreams     int    `flag:"grpc-max-streams" group:"limits" help:"most calls in flight on one gRPC connection (HTTP/2 concurrent streams)"`
	GRPCStreamInFlight int    `flag:"grpc-stream-inflight" group:"limits" help:"most calls in flight on one Lifecycle stream; past it the router stops reading the stream until one finishes"`
	// Fair connection slots (config/conns.go).
	HTTPMaxConnsPerClient int           `flag:"http-max-conns-per-client" group:"limits" help:"most connections one client address (IPv6: one /64) may hold open on the HTTP listener; more are closed at once (kvrouter_conns_refused_total{reason=per_client_cap}), so one client cannot take the slots of http-max-conns; 0 = no cap"`
	GRPCMaxConnsPerClient int           `flag:"grpc-max-conns-per-client" group:"limits" help:"most connections one client address (IPv6: one /64) may hold open on the gRPC listener; more are closed at once; 0 = no cap"`
	ConnLimitExempt       []string      `flag:"conn-limit-exempt" group:"security" help:"comma-separated CIDRs or IPs the per-client connection caps do not apply to: load balancers and proxies that carry many clients' connections (their connections still count against http-max-conns and grpc-max-conns)"`
	UnauthIdleTimeout     time.Duration `flag:"unauthenticated-idle-timeout" group:"security" help:"close a connection that has not passed the token check when it idles this long: HTTP between requests (a request refused with 401 closes its connection at once), gRPC from its accept until its first call that passes the token check (every call passes without --api-token-file; health checks do not count); 0 = off"`

	// ---- Gateway endpoint picker (eppapi; config/gateway.go) ----
	EPPAddr              string `flag:"epp-addr" group:"gateway" help:"listen address of the Gateway API Inference Extension endpoint picker (Envoy ext_proc, envoy.service.ext_proc.v3.ExternalProcessor, and grpc.health.v1 with the liveness and readiness services); empty = off. The gateway is its only client: same client token as the gRPC API (--api-token-file, sent by the gateway as authorization: Bearer initial metadata), body limit --max-body-bytes (docs/gateway.md)"`
	EPPMaxConns          int    `flag:"epp-max-conns" group:"gateway" help:"most gateway connections open at once on the endpoint picker's listener; more wait in the kernel's accept queue (0 = no cap)"`
	EPPFallbackEndpoints int    `flag:"epp-fallback-endpoints" group:"gateway" help:"endpoints named after the chosen one in x-gateway-destination-endpoint, for the gateway's retries (other workers of the request's subset, in worker-id order); the request is recorded on the endpoint the gateway reports it served (0 = the chosen endpoint only)"`
	EPPTLSCert           string `flag:"epp-tls-cert" group:"gateway" help:"PEM certificate the endpoint picker's port serves TLS with (with --epp-tls-key); empty = plaintext gRPC"`
	EPPTLSKey            string `flag:"epp-tls-key" group:"gateway" help:"PEM private key of --epp-tls-cert"`
	EPPTLSClientCA       string `flag:"epp-tls-client-ca" group:"gateway" help:"PEM CA bundle the gateway's client certificate must chain to: mutual TLS on the endpoint picker's port (needs --epp-tls-cert)"`

	// ---- NATS ----
	NATSURL                 string        `flag:"nats-url" group:"essentials" help:"external NATS URL; empty starts an embedded NATS server"`
	NATSListen              string        `flag:"nats-listen" group:"events" help:"embedded NATS listen address (host:port; port 0 = random); beyond loopback it requires authentication (--nats-user, --nats-nkey or --nats-server-config) unless --nats-insecure"`
	KVEventsSubject         string        `flag:"kv-events-subject" group:"events" help:"subject KV events are published on"`
	WorkersSubject          string        `flag:"workers-subject" group:"events" help:"subject worker heartbeats are published on"`
	JetStream               bool          `flag:"jetstream" group:"events" help:"keep KV events in a JetStream stream so late replicas replay them"`
	KVEventsStream          string        `flag:"kv-events-stream" group:"events" help:"JetStream stream name for KV events"`
	KVEventsMaxAge          time.Duration `flag:"kv-events-max-age" group:"events" help:"how long the stream keeps KV events"`
	KVEventsMaxMsgs         int64         `flag:"kv-events-max-msgs" group:"events" help:"most messages the KV-event stream keeps, the oldest discarded past it (a replica that had not read them counts kv_event_stream_gaps); snapshots purge the stream long before; must be above router-snapshot-threshold; negative = no bound"`
	KVEventsMaxBytes        int64         `flag:"kv-events-max-bytes" group:"events" help:"most bytes the KV-event stream keeps, the oldest discarded past it; a snapshot is taken past half of it; reserved on the NATS server's store; negative = no bound"`
	RouterSnapshotThreshold uint64        `flag:"router-snapshot-threshold" group:"events" help:"when the KV-event stream holds more messages, one replica snapshots the index to a JetStream object store and purges the stream; 0 disables"`
	SnapshotInterval        time.Duration `flag:"snapshot-interval" group:"events" help:"how often the snapshot replica checks the stream size"`
	SnapshotBucket          string        `flag:"snapshot-bucket" group:"events" help:"JetStream object store bucket for index snapshots"`
	SnapshotMaxBytes        int64         `flag:"snapshot-max-bytes" group:"events" help:"bound of the snapshot bucket in bytes (about 20 bytes per indexed worker block, up to 46 when chains are one block long; old and new snapshot coexist while one is stored); a snapshot that does not fit is not stored and the stream not purged; negative = no bound"`
	HeartbeatTimeout        time.Duration `flag:"heartbeat-timeout" group:"events" help:"remove a worker whose heartbeats stopped for this long"`
	StaticWorkers           []string      `flag:"static-workers" group:"essentials" help:"comma-separated id=url[@dp_start:dp_size][;role=prefill|decode|both] workers registered without heartbeats (role default both)"`
	ZMQEvents               bool          `flag:"zmq-events" group:"events" help:"subscribe to workers that announce a kv_events_endpoint (vLLM/SGLang ZMQ publishers)"`
	ZMQEndpoints            []string      `flag:"zmq-endpoints" group:"events" help:"comma-separated id=tcp://host:port[;replay=tcp://host:port][;dp=N][;start=R][;bind] engines publishing KV events on ZMQ (dp ranks R..R+N-1 on port..port+N-1)"`
	ZMQReconnectBase        time.Duration `flag:"zmq-reconnect-base" group:"events" help:"first wait before redialling a ZMQ publisher whose dial failed or whose connection dropped within 10 s; doubles (with jitter) per failure in a row"`
	ZMQReconnectMax         time.Duration `flag:"zmq-reconnect-max" group:"events" help:"longest wait between redials of one ZMQ publisher"`
	ZMQConnectRate          float64       `flag:"zmq-connect-rate" group:"events" help:"connection attempts per second to ZMQ publishers, all ranks together (bursts of 4x, at least 1); 0 = no shared cap"`

	// ---- discovery and engine health (config/discovery.go) ----
	Discover                    []string      `flag:"discover" group:"essentials" help:"find engines that never heartbeat, repeatable or comma-separated (encode commas inside a URI as %2C): dns://NAME:PORT (A/AAAA records, e.g. a headless Service), dns+srv://NAME (SRV records), k8s://NAMESPACE?selector=app%3Dvllm (Ready pods), k8s-inferencepool://NAMESPACE/NAME (an InferencePool's pods); options kv-events-port (5557; 0 = none), replay-port (5558), dp-size, block-size, model, port (k8s), server=HOST:PORT and interval (dns), api=GROUP/VERSION (pool); pods override them with kvrouter.io/<option> annotations"`
	DiscoverInterval            time.Duration `flag:"discover-interval" group:"discovery" help:"how often DNS discovery resolves its names again (Kubernetes sources watch and need no interval)"`
	DrainGrace                  time.Duration `flag:"drain-grace" group:"discovery" help:"an engine gone from discovery takes no new requests and is removed this long after (its requests in flight finish meanwhile)"`
	Kubeconfig                  string        `flag:"kubeconfig" group:"discovery" help:"kubeconfig for the Kubernetes sources (default: the in-cluster service account, then $KUBECONFIG and ~/.kube/config)"`
	EnginePoll                  string        `flag:"engine-poll" group:"discovery" help:"which engines every replica polls on /health and /metrics: discovered (default), all (also static and heartbeat workers) or off"`
	EnginePollInterval          time.Duration `flag:"engine-poll-interval" group:"discovery" help:"period of each engine's /health and /metrics poll (jittered ±10%)"`
	EnginePollTimeout           time.Duration `flag:"engine-poll-timeout" group:"discovery" help:"longest one engine's poll (/health and /metrics) may take"`
	EnginePollMaxBackoff        time.Duration `flag:"engine-poll-max-backoff" group:"discovery" help:"a failing engine is polled less often, the wait doubling up to this"`
	EngineUnhealthyThreshold    int           `flag:"engine-unhealthy-threshold" group:"discovery" help:"failed health checks in a row that make an engine unhealthy (no new requests until one succeeds)"`
	EngineWaitingThreshold      float64       `flag:"engine-waiting-threshold" group:"discovery" help:"an engine rank whose own waiting queue (vllm:num_requests_waiting, sglang:num_queue_reqs) holds more requests is busy: no new requests until it drops (other clients' requests count too); negative disables"`
	ActiveDecodeBlocksThreshold float64       `flag:"active-decode-blocks-threshold" group:"discovery" help:"Dynamo's busy threshold: an engine rank whose KV usage (vllm:kv_cache_usage_perc, sglang:token_usage) exceeds this fraction is busy; negative disables (default, as Dynamo)"`
	// KubeClients, when set, are the Kubernetes sources' API clients
	// instead of ones built from --kubeconfig (not a flag: tests and
	// programs embedding a replica).
	KubeClients *discovery.KubeClients

	// ---- NATS authentication and TLS (docs/security.md): the router's
	// own connection, and the clients an embedded server accepts ----
	NATSCreds        string `flag:"nats-creds" group:"security" help:"NATS .creds file (user JWT and nkey seed) for a NATS in operator mode"`
	NATSNkey         string `flag:"nats-nkey" group:"security" help:"file holding a NATS user nkey seed (SU...; nk -gen user); an embedded server accepts its public key"`
	NATSUser         string `flag:"nats-user" group:"security" help:"NATS user; its password comes from --nats-password-file or the environment variable KVROUTER_NATS_PASSWORD (never a flag: flag values show in ps); an embedded server accepts this user"`
	NATSPasswordFile string `flag:"nats-password-file" group:"security" help:"file holding the password of --nats-user (trailing newline ignored)"`
	NATSPassword     string `env:"nats-password"` // environment only
	NATSTLSCA        string `flag:"nats-tls-ca" group:"security" help:"PEM CA bundle the NATS server's certificate must chain to; any --nats-tls-* makes the connection to an external NATS require TLS"`
	NATSTLSCert      string `flag:"nats-tls-cert" group:"security" help:"PEM certificate: the client certificate for an external NATS that verifies clients, or the embedded server's certificate (it then requires TLS from network clients)"`
	NATSTLSKey       string `flag:"nats-tls-key" group:"security" help:"PEM private key of --nats-tls-cert"`
	NATSServerConfig string `flag:"nats-server-config" group:"security" help:"nats-server configuration file for the embedded server (authorization users with permissions, accounts, operator and resolver, tls); --nats-listen, --data-dir and --jetstream override its listen and jetstream settings, and --nats-user/--nats-nkey are added to its users"`
	NATSInsecure     bool   `flag:"nats-insecure" group:"security" help:"let the embedded NATS listen beyond loopback without authentication: anyone who reaches it can then publish KV events and heartbeats, clear workers' indexes and purge the stream"`

	// ---- index trust per rank (docs/index-trust.md) ----
	IndexTrust                 bool          `flag:"index-trust" group:"trust" help:"rate each worker rank's KV event index exact, degraded or untrusted (gaps, failed replays, refused events, stale streams, parity drift) and score untrusted ranks from predicted blocks (approximate mode's rule) until a replay, a clear or a clean parity window restores them; event mode only"`
	IndexTrustGapGrace         time.Duration `flag:"index-trust-gap-grace" group:"trust" help:"an event-id gap neither replayed nor followed by a clear of the rank within this long makes the rank untrusted (degraded meanwhile)"`
	IndexTrustStaleAfter       time.Duration `flag:"index-trust-stale-after" group:"trust" help:"a rank routed requests for this long with no KV event from it is untrusted (its event stream is presumed dead); events resuming with no gap lift it"`
	IndexTrustRefusedWindow    time.Duration `flag:"index-trust-refused-window" group:"trust" help:"an event the index refused (parent_not_found, invalid_event, ...) degrades its rank for this long"`
	IndexTrustRefusedUntrusted int           `flag:"index-trust-refused-untrusted" group:"trust" help:"this many refused events of one rank within index-trust-refused-window make it untrusted"`
	IndexTrustParityWindow     int           `flag:"index-trust-parity-window" group:"trust" help:"requests with a predicted cache hit per parity judgement of a rank (predicted vs engine-confirmed cached tokens)"`
	IndexTrustParityDegraded   float64       `flag:"index-trust-parity-degraded" group:"trust" help:"a parity window whose false-hit fraction (predicted cached tokens the engine did not confirm / predicted) exceeds this degrades the rank"`
	IndexTrustParityUntrusted  float64       `flag:"index-trust-parity-untrusted" group:"trust" help:"a parity window whose false-hit fraction exceeds this makes the rank untrusted"`
	IndexTrustParityClean      float64       `flag:"index-trust-parity-clean" group:"trust" help:"a parity window whose false-hit fraction is at most this restores the rank to exact"`
	IndexTrustFallbackTTL      time.Duration `flag:"index-trust-fallback-ttl" group:"trust" help:"how long a routed prompt's blocks are predicted cached on a rank that is not exact, when router-predicted-ttl-secs is 0"`

	// ---- routing (Dynamo names) ----
	BlockSize                  int           `flag:"block-size" group:"essentials" help:"KV block size in tokens; workers must match"`
	OverlapScoreWeight         float64       `flag:"overlap-score-weight" group:"routing" help:"Dynamo's deprecated weight of prefill blocks; when >= 0 it sets prefill_load_scale (and 0 also zeroes overlap_score_credit); negative = unset"`
	OverlapScoreCredit         float64       `flag:"overlap-score-credit" group:"routing" help:"credit per device-cached prefix block, 0..1"`
	PrefillLoadScale           float64       `flag:"prefill-load-scale" group:"routing" help:"scale of adjusted prefill blocks in the cost"`
	HostCacheHitWeight         float64       `flag:"host-cache-hit-weight" group:"routing" help:"credit per host-pinned cached block"`
	DiskCacheHitWeight         float64       `flag:"disk-cache-hit-weight" group:"routing" help:"credit per disk cached block"`
	SharedCacheMultiplier      float64       `flag:"shared-cache-multiplier" group:"routing" help:"Dynamo's shared_cache_multiplier: credit per block of the prompt's shared-tier prefix (KV events with medium/storage_tier shared, or from --shared-cache-workers) beyond a worker's own device prefix, given to every worker; 0 = off (Dynamo's default; its CLI uses 0.5 with a shared cache)"`
	SharedCacheWorkers         []string      `flag:"shared-cache-workers" group:"routing" help:"comma-separated worker ids that are the fleet's shared KV store (an LMCache or Mooncake store publishing KV events as a worker): all their events index into the shared tier, they need no registration and are refused as routing candidates"`
	RouterTemperature          float64       `flag:"router-temperature" group:"routing" help:"softmax temperature; 0 = argmin"`
	UseKVEvents                bool          `flag:"use-kv-events" group:"essentials" help:"index workers' KV events; false = approximate mode from routing decisions"`
	RouterTrackActiveBlocks    bool          `flag:"router-track-active-blocks" group:"routing" help:"count active (decode) blocks per worker"`
	RouterTrackOutputBlocks    bool          `flag:"router-track-output-blocks" group:"routing" help:"count generated blocks as they grow"`
	RouterTrackPrefillTokens   bool          `flag:"router-track-prefill-tokens" group:"routing" help:"count prompt tokens still to prefill as load"`
	RouterAssumeKVReuse        bool          `flag:"router-assume-kv-reuse" group:"routing" help:"deduplicate shared prefix blocks in the active-block count"`
	RouterActiveSequenceStride int           `flag:"router-active-sequence-stride" group:"routing" help:"keep one sequence hash per N prompt blocks in the active-sequence tracker and its gossip (fewer hashes per add on every peer; shared prefixes deduplicated in steps of N blocks); every replica must use the same value (Dynamo's default: 1)"`
	RouterTTLSecs              float64       `flag:"router-ttl-secs" group:"routing" help:"approximate mode: TTL of predicted blocks"`
	RouterMaxTreeSize          int           `flag:"router-max-tree-size" group:"routing" help:"approximate mode: max predicted blocks before pruning"`
	RouterPruneTargetRatio     float64       `flag:"router-prune-target-ratio" group:"routing" help:"approximate mode: prune down to this fraction of the max"`
	RouterPredictedTTLSecs     float64       `flag:"router-predicted-ttl-secs" group:"routing" help:"event mode: predict a routed prompt's blocks as cached for this long, until its KV events arrive (Dynamo suggests 5); 0 disables (default, as Dynamo)"`
	RouterQueueThreshold       float64       `flag:"router-queue-threshold" group:"routing" help:"queue when every worker's prefill tokens exceed this x max_num_batched_tokens; negative disables"`
	RouterQueuePolicy          string        `flag:"router-queue-policy" group:"routing" help:"fcfs or wspt"`
	RouterMaxQueueLength       int           `flag:"router-max-queue-length" group:"routing" help:"requests that may wait; more are rejected with 429"`
	RouterMaxQueueWait         time.Duration `flag:"router-max-queue-wait" group:"routing" help:"longest wait in the queue before 429"`
	PolicyFile                 string        `flag:"policy-file" group:"routing" help:"YAML policy file composing the decision's pipeline (admitter, filters, weighted scorers, picker) for every model and per served model (docs/policy.md); read and checked at startup, an error names the line; empty = the default pipeline the routing flags configure"`
	DecisionSample             float64       `flag:"decision-sample" group:"routing" help:"fraction of the decisions nobody asked to explain whose route receipt is kept in the ring anyway (GET /decisions/{request_id}); 0..1"`
	DecisionRingEntries        int           `flag:"decision-ring-entries" group:"routing" help:"most route receipts a replica keeps (oldest dropped first); 0 = keep none"`
	DecisionRingBytes          int           `flag:"decision-ring-bytes" group:"routing" help:"most bytes of route-receipt JSON a replica keeps (oldest dropped first); 0 = keep none"`
	RouterCost                 string        `flag:"router-cost" group:"essentials" help:"cost a decision minimises: ttft (predicted time to first token from queued prefill, uncached tokens and each rank's measured prefill throughput, plus the delay a miss imposes on the rank and a KV-capacity wait; the default: it served more of the prompt tokens from cache than dynamo in every workload measured, README section Choosing a cost) or dynamo (Dynamo's formula, bit for bit: Dynamo's exact decisions)"`
	RouterTTFTUncachedWeight   float64       `flag:"router-ttft-uncached-weight" group:"routing" help:"ttft cost: extra weight of the request's own uncached prefill time, for the requests queued behind it"`
	RouterTTFTKVHeadroom       float64       `flag:"router-ttft-kv-headroom" group:"routing" help:"ttft cost: fraction of a rank's KV cache active requests may fill before a new request is charged for the wait (0..1]"`
	RouterPrefillTokensPerSec  float64       `flag:"router-prefill-tokens-per-sec" group:"routing" help:"ttft cost: prefill throughput assumed for a rank until its completions have been measured"`
	MaxLocalPrefillLength      uint64        `flag:"max-local-prefill-length" group:"routing" help:"disaggregated fleets (workers with role prefill/decode): a prompt whose tokens not cached on the chosen decode worker are at most this many is prefilled there, without a KV transfer (Dynamo's max_local_prefill_length)"`
	MaxNumBatchedTokens        uint64        `flag:"max-num-batched-tokens" group:"routing" help:"queue-threshold unit for workers that do not announce theirs"`
	IndexerShards              int           `flag:"indexer-shards" group:"tuning" help:"indexer shard actors; 0 = GOMAXPROCS"`
	MaxWorkers                 int           `flag:"max-workers" group:"limits" help:"most workers the registry holds; more are refused (HTTP 429, counted as worker_rejected{reason=registry_full}); 0 = no bound"`
	MaxRanks                   int           `flag:"max-ranks" group:"limits" help:"most (worker, dp rank) candidates the registry holds; 0 = no bound"`
	MaxPromptTokens            int           `flag:"max-prompt-tokens" group:"limits" help:"longest prompt routed, in tokens; longer ones get 400; 0 = no bound"`
	TokenizeConcurrency        int           `flag:"tokenize-concurrency" group:"limits" help:"prompts (text or chat) the router tokenizes at once with its own tokenizers; more wait for a slot; 0 = one less than GOMAXPROCS (at least 1), so pathological prompts cannot hold every core"`
	TokenizeQueueTimeout       time.Duration `flag:"tokenize-queue-timeout" group:"limits" help:"longest a prompt waits for a tokenization slot; then 503 with Retry-After (kvrouter_tokenize_busy_total)"`
	MaxRequestIDBytes          int           `flag:"max-request-id-bytes" group:"limits" help:"longest request_id accepted; longer ones get 400; 0 = no bound"`
	ShardBacklog               int           `flag:"shard-backlog" group:"tuning" help:"KV events queued to one indexer shard; past it ingestion waits up to backpressure-wait, then drops (backlog_dropped_total{queue=shard})"`
	BackpressureWait           time.Duration `flag:"backpressure-wait" group:"tuning" help:"longest a KV-event subscription is held back by a full shard backlog before the event is dropped"`
	ReplicationBacklog         int           `flag:"replication-backlog" group:"tuning" help:"peers' gossiped events queued for applying; more are dropped (backlog_dropped_total{queue=replication}) and repaired by anti-entropy"`
	UnregisteredHoldBlocks     int           `flag:"unregistered-event-hold-blocks" group:"events" help:"KV-event blocks of workers not registered (yet) held until they register; more are dropped (kv_events_dropped_total{reason=unregistered_worker})"`
	UnregisteredHoldAge        time.Duration `flag:"unregistered-event-hold-age" group:"events" help:"longest a held event waits for its worker to register before it is dropped"`
	MaxActiveRequests          int           `flag:"max-active-requests" group:"limits" help:"requests this replica routed that may be active (not freed or expired) at once; more get 429; 0 = no bound"`
	DecisionTimeout            time.Duration `flag:"decision-timeout" group:"tuning" help:"longest wait for shard and load replies before deciding with what arrived"`
	StaleRequestExpiry         time.Duration `flag:"stale-request-expiry" group:"routing" help:"free requests never freed after this long; also the longest lease"`
	RequestLeaseMin            time.Duration `flag:"request-lease-min" group:"routing" help:"shortest lease of a request this replica routed, and what a renewal (the proxy while an answer streams) grants; lease = min(stale-request-expiry, max(this, prompt tokens × request-lease-prefill-token-time + expected output tokens × request-lease-decode-token-time)); an expired lease frees the request on every replica (docs/operations.md)"`
	RequestLeaseDecodeToken    time.Duration `flag:"request-lease-decode-token-time" group:"routing" help:"lease time per expected output token (a slow decode); 0 = no leases, requests expire after stale-request-expiry"`
	RequestLeasePrefillToken   time.Duration `flag:"request-lease-prefill-token-time" group:"routing" help:"lease time per prompt token (a slow prefill)"`
	RequestLeaseDefaultOutput  uint64        `flag:"request-lease-default-output-tokens" group:"routing" help:"expected output tokens of a request that names none (no max_tokens or expected_output_tokens), for its lease"`
	MaxActiveRequestsPerClient int           `flag:"max-active-requests-per-client" group:"limits" help:"requests one client (its bearer token, else its address) may have active on this replica at once; more get 429 with reason client_active_requests; 0 = no bound (a gateway sending everyone's requests under one token needs a higher bound)"`
	ProxyOutputBlockDecayFloor float64       `flag:"proxy-output-block-decay-floor" group:"routing" help:"proxy: smallest weight of a generated block when the expected output is exceeded"`
	MigrationLimit             int           `flag:"migration-limit" group:"routing" help:"proxy: most times one request moves to another worker when its engine fails (unreachable, cut mid-stream, failed decode); a stream continues from the text already sent (Dynamo's migration_limit, whose default 0 turns it off; 0 here sends the failure to the client)"`

	// ---- sticky sessions (config/sessions.go) ----
	SessionTTL        time.Duration `flag:"session-ttl" group:"sessions" help:"a sticky session ends this long after its last request (Dynamo's sticky router has no named knob; 0 is refused)"`
	MaxSessions       int           `flag:"max-sessions" group:"sessions" help:"most sticky sessions (ended ones' tombstones included) a replica holds; a new one past it evicts the least recently used (kvrouter_session_events_total{event=evicted})"`
	MaxSessionIDBytes int           `flag:"max-session-id-bytes" group:"sessions" help:"longest session id accepted; longer ones (or ids with control characters or invalid UTF-8) get 400"`
	SessionHeader     string        `flag:"session-header" group:"sessions" help:"request header carrying the session id on /route and the proxy endpoints; empty: the header is not read"`
	SessionBodyField  string        `flag:"session-body-field" group:"sessions" help:"top-level JSON body field carrying the session id (the header wins when both are sent); empty: the body is not read"`

	// ---- cluster ----
	ClusterBind       string   `flag:"cluster-bind" group:"cluster" help:"memberlist bind host:port; empty runs a single replica"`
	ClusterJoin       []string `flag:"cluster-join" group:"cluster" help:"comma-separated peers (host:port or a DNS name resolving to peers)"`
	ClusterMinMembers int      `flag:"cluster-min-members" group:"cluster" help:"live cluster members (this replica included) /readyz wants before the replica is first ready; 0 = 2 when a seed of cluster-join names another address (at least one seed reachable), else 1; a replica alone because its cluster key is wrong stays unready whatever this says (docs/operations.md)"`
	ClusterAdvertise  string   `flag:"cluster-advertise" group:"cluster" help:"address peers reach this replica at (default: bind address)"`
	ClusterFast       bool     `flag:"cluster-fast" group:"cluster" help:"fast failure detection for failover tests on loopback (memberlist probes every 100 ms, a silent replica dropped within about 1.2 s): on a loaded machine it declares live replicas dead (measured: 10 false deaths in a 20 s 3-replica kvbench run at 64 qps); the default probes every second and waits 4 s or more before declaring death"`
	// Dynamo's MAX_REPLICA_BATCH_EVENTS and MAX_REPLICA_BATCH_DURATION.
	ClusterBatchMaxEvents int           `flag:"cluster-batch-max-events" group:"cluster" help:"gossip: send a batch of active-sequence events once it holds this many (Dynamo: 256)"`
	ClusterBatchInterval  time.Duration `flag:"cluster-batch-interval" group:"cluster" help:"gossip: send a batch this long after its first event at the latest (Dynamo: 1ms, fixed); longer batches cost peers less per event and add this much to the gossip delay"`
	// Gossip security (cluster package documentation; docs/security.md).
	ClusterKeyFile  string `flag:"cluster-key-file" group:"security" help:"file of base64 cluster keys, one per line, primary first, each 16, 24 or 32 bytes (openssl rand -base64 32): memberlist encrypts and authenticates all gossip with them (AES-GCM) and the gossip streams use TLS with an identity derived from them; re-read every 10s, so keys rotate without restarts (add the new key second on every replica, then make it first, then remove the old)"`
	ClusterLabel    string `flag:"cluster-label" group:"security" help:"memberlist cluster label: gossip carrying another label is discarded, so fleets sharing a network or a key stay apart"`
	ClusterTLSCert  string `flag:"cluster-tls-cert" group:"security" help:"PEM certificate for mutual TLS on the gossip streams instead of the identity derived from the cluster key (with --cluster-tls-key and --cluster-tls-ca; re-read at every connection; memberlist itself still needs --cluster-key-file)"`
	ClusterTLSKey   string `flag:"cluster-tls-key" group:"security" help:"PEM private key of --cluster-tls-cert"`
	ClusterTLSCA    string `flag:"cluster-tls-ca" group:"security" help:"PEM CA bundle a peer's gossip-stream certificate must chain to (no host-name check: use a CA that signs only this fleet)"`
	ClusterInsecure bool   `flag:"cluster-insecure" group:"security" help:"allow gossip without --cluster-key-file on a non-loopback --cluster-bind: anyone who reaches the gossip ports can then join, read in-flight requests and steer routing"`

	// policy is --policy-file's pipelines, read once by Validate.
	policy *policyPipelines
}

// DefaultProcsPerCPU is procs-per-cpu's default: two Go processors per
// CPU. With one per CPU, a shard applying KV events keeps its processor
// and a lookup's hops (scheduler, shards, reply) wait for one; with two,
// the kernel interleaves them. On the 2-core machine, 1,000 workers at
// steady state: lookup p99 at 24k events/s went from 17–19 ms to 2.5–5.2
// ms (docs/benchmarks.md, "Index and KV-event ingest").
const DefaultProcsPerCPU = 2.0

// MaxProcsPerCPU bounds procs-per-cpu: past a few processors per CPU the
// runtime's own overhead (GC workers, idle processors polling) grows
// with no tail left to win.
const MaxProcsPerCPU = 8

// DefaultActiveSequenceStride is router-active-sequence-stride's default.
// Dynamo's is 1; 8 makes every peer apply 8 times fewer hashes per
// gossiped add (5 vs 1 replicas: 3.19-3.74x the decisions/s from CPU per
// decision against 2.22-2.46x at stride 1) with hit rate and load spread
// unchanged within run-to-run noise (docs/benchmarks.md, "Many replicas").
// Every replica must use the same value, so a rolling upgrade
// from a release defaulting to 1 sets it explicitly until all run this one.
const DefaultActiveSequenceStride = 8

// Default returns the defaults (Dynamo's where Dynamo has the knob, except
// router-active-sequence-stride: DefaultActiveSequenceStride).
// DefaultGCPercent is Go's own GC target. 400 (an earlier default)
// made cycles four times rarer, but in 150 s steady runs at 16k KV events/s
// its five-fold heap headroom gave lookup p99.9 of 0.2–3 s in 3 of 3 runs
// against 28–35 ms with 100 in 2 of 2 (docs/operations.md, "Memory").
const DefaultGCPercent = 100

func Default() Config {
	sc := scheduling.DefaultConfig()
	return Config{
		HTTPAddr:        "127.0.0.1:8080",
		DataDir:         "./data",
		LogLevel:        "info",
		LogFormat:       LogFormatText,
		ShutdownTimeout: 10 * time.Second,
		MaxBodyBytes:    8 << 20,
		Proxy:           true,
		TokenizerMode:   "router",

		Parity:                  true,
		ParityWindow:            parity.DefaultWindow,
		ParityMinSamples:        parity.DefaultMinSamples,
		ParityMismatchThreshold: parity.DefaultMismatchThreshold,
		ParityCleanWindow:       parity.DefaultCleanWindow,
		ParityAutoSwitch:        true,
		GCPercent:               DefaultGCPercent,
		ProcsPerCPU:             DefaultProcsPerCPU,
		MemoryLimit:             "auto",

		WorkerURLAllow:        []string{netpolicy.Private},
		HTTPReadHeaderTimeout: 10 * time.Second,
		HTTPReadTimeout:       60 * time.Second,
		HTTPWriteTimeout:      30 * time.Second,
		HTTPIdleTimeout:       120 * time.Second,
		HTTPMaxConns:          8192,
		GRPCMaxConns:          1024,
		GRPCMaxStreams:        1024,
		GRPCStreamInFlight:    1024,
		EPPMaxConns:           64,
		EPPFallbackEndpoints:  2,
		HTTPMaxConnsPerClient: DefaultHTTPMaxConnsPerClient,
		GRPCMaxConnsPerClient: DefaultGRPCMaxConnsPerClient,
		UnauthIdleTimeout:     DefaultUnauthIdleTimeout,

		NATSListen:       "127.0.0.1:4222",
		KVEventsSubject:  "kvrouter.kv_events",
		WorkersSubject:   "kvrouter.workers",
		JetStream:        true,
		KVEventsStream:   "KVROUTER_KV_EVENTS",
		KVEventsMaxAge:   natsbus.DefaultMaxAge,
		KVEventsMaxMsgs:  natsbus.DefaultMaxMsgs,
		KVEventsMaxBytes: natsbus.DefaultMaxBytes,
		HeartbeatTimeout: 10 * time.Second,
		ZMQEvents:        true,
		ZMQReconnectBase: zmqDefaults.base,
		ZMQReconnectMax:  zmqDefaults.max,
		ZMQConnectRate:   zmqDefaults.rate,

		DiscoverInterval:            5 * time.Second,
		DrainGrace:                  actors.DefaultDrainGrace,
		EnginePoll:                  EnginePollDiscovered,
		EnginePollInterval:          time.Second,
		EnginePollTimeout:           2 * time.Second,
		EnginePollMaxBackoff:        5 * time.Second,
		EngineUnhealthyThreshold:    1,
		EngineWaitingThreshold:      DefaultEngineWaitingThreshold,
		ActiveDecodeBlocksThreshold: -1,

		RouterSnapshotThreshold: 1_000_000,
		SnapshotInterval:        5 * time.Second,
		SnapshotBucket:          "KVROUTER_INDEX_SNAPSHOT",
		SnapshotMaxBytes:        natsbus.DefaultSnapshotMaxBytes,

		BlockSize:                  16,
		OverlapScoreWeight:         -1,
		OverlapScoreCredit:         sc.OverlapScoreCredit,
		PrefillLoadScale:           sc.PrefillLoadScale,
		HostCacheHitWeight:         sc.HostCacheHitWeight,
		DiskCacheHitWeight:         sc.DiskCacheHitWeight,
		SharedCacheMultiplier:      sc.SharedCacheMultiplier,
		RouterTemperature:          sc.RouterTemperature,
		UseKVEvents:                true,
		RouterTrackActiveBlocks:    true,
		RouterTrackOutputBlocks:    false,
		RouterTrackPrefillTokens:   sc.TrackPrefillTokens,
		RouterAssumeKVReuse:        sc.AssumeKVReuse,
		RouterActiveSequenceStride: DefaultActiveSequenceStride,
		RouterTTLSecs:              120,
		RouterMaxTreeSize:          1 << 20,
		RouterPruneTargetRatio:     0.8,
		RouterPredictedTTLSecs:     0,
		IndexTrust:                 true,
		IndexTrustGapGrace:         trust.DefaultGapGrace,
		IndexTrustStaleAfter:       trust.DefaultStaleAfter,
		IndexTrustRefusedWindow:    trust.DefaultRefusedWindow,
		IndexTrustRefusedUntrusted: trust.DefaultRefusedUntrusted,
		IndexTrustParityWindow:     trust.DefaultParityWindow,
		IndexTrustParityDegraded:   trust.DefaultParityDegraded,
		IndexTrustParityUntrusted:  trust.DefaultParityUntrusted,
		IndexTrustParityClean:      trust.DefaultParityClean,
		IndexTrustFallbackTTL:      trust.DefaultFallbackTTL,
		RouterQueueThreshold:       sc.RouterQueueThreshold,
		RouterQueuePolicy:          string(sc.RouterQueuePolicy),
		RouterMaxQueueLength:       sc.MaxQueueLength,
		RouterMaxQueueWait:         60 * time.Second,
		DecisionSample:             actors.DefaultDecisionSample,
		DecisionRingEntries:        actors.DefaultDecisionRingEntries,
		DecisionRingBytes:          actors.DefaultDecisionRingBytes,
		RouterCost:                 string(scheduling.DefaultRouterCost), // not sc's: DefaultConfig keeps Dynamo's cost
		RouterTTFTUncachedWeight:   sc.TTFT.UncachedWeight,
		RouterTTFTKVHeadroom:       sc.TTFT.KVHeadroom,
		RouterPrefillTokensPerSec:  sc.TTFT.PrefillTokensPerSec,
		MaxLocalPrefillLength:      sc.MaxLocalPrefillLength,
		MaxNumBatchedTokens:        8192,
		DecisionTimeout:            250 * time.Millisecond,
		MaxWorkers:                 actors.DefaultMaxWorkers,
		MaxRanks:                   actors.DefaultMaxRanks,
		MaxPromptTokens:            scheduling.DefaultMaxPromptTokens,
		TokenizeQueueTimeout:       2 * time.Second,
		MaxRequestIDBytes:          scheduling.DefaultMaxRequestIDBytes,
		MaxActiveRequests:          scheduling.DefaultMaxActiveRequests,
		ShardBacklog:               1 << 16,
		BackpressureWait:           time.Second,
		ReplicationBacklog:         1 << 16,
		UnregisteredHoldBlocks:     1 << 20,
		UnregisteredHoldAge:        time.Minute,
		StaleRequestExpiry:         time.Hour,
		RequestLeaseMin:            sequence.DefaultLeaseMin,
		RequestLeaseDecodeToken:    sequence.DefaultLeaseDecodeTokenTime,
		RequestLeasePrefillToken:   sequence.DefaultLeasePrefillTokenTime,
		RequestLeaseDefaultOutput:  sequence.DefaultLeaseDefaultOutputTokens,
		MaxActiveRequestsPerClient: scheduling.DefaultMaxActiveRequestsPerClient,
		ProxyOutputBlockDecayFloor: 0.1,
		MigrationLimit:             3,
		SessionTTL:                 sessions.DefaultTTL,
		MaxSessions:                sessions.DefaultMaxSessions,
		MaxSessionIDBytes:          sessions.DefaultMaxIDBytes,
		SessionHeader:              DefaultSessionHeader,
		SessionBodyField:           DefaultSessionBodyField,
		ClusterBatchMaxEvents:      cluster.DefaultBatchMaxEvents,
		ClusterBatchInterval:       cluster.DefaultBatchInterval,
	}
}

// Validate checks what can be checked without starting anything.
func (c *Config) Validate() error {
	var errs []error
	if c.HTTPAddr == "" {
		errs = append(errs, errors.New("http-addr must be set"))
	}
	if c.MigrationLimit < 0 || c.MigrationLimit > maxMigrationLimit {
		errs = append(errs, fmt.Errorf("migration-limit must be between 0 and %d, got %d", maxMigrationLimit, c.MigrationLimit))
	}
	if c.MaxBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("max-body-bytes must be > 0, got %d", c.MaxBodyBytes))
	}
	errs = append(errs, c.validateLogging()...)
	errs = append(errs, c.validateHTTP()...)
	errs = append(errs, c.validateGateway()...)
	errs = append(errs, c.validateConns()...)
	errs = append(errs, c.validateModels()...)
	if err := c.loadPolicy(); err != nil {
		errs = append(errs, err)
	}
	if c.Parity {
		if err := c.ParityConfig().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.validateNATS()...)
	if _, err := scheduling.ParseQueuePolicy(c.RouterQueuePolicy); err != nil {
		errs = append(errs, err)
	}
	if _, err := scheduling.ParseCostModel(c.RouterCost); err != nil {
		errs = append(errs, err)
	}
	if _, err := ParseStaticWorkers(c.StaticWorkers); err != nil {
		errs = append(errs, err)
	}
	if _, err := index.ParseSharedStores(c.SharedCacheWorkers); err != nil {
		errs = append(errs, fmt.Errorf("shared-cache-workers: %w", err))
	}
	if _, err := ParseZMQEndpoints(c.ZMQEndpoints); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateZMQ()...)
	if c.TokenizeConcurrency < 0 || c.TokenizeQueueTimeout <= 0 {
		errs = append(errs, fmt.Errorf("tokenize-concurrency must be >= 0 and tokenize-queue-timeout > 0, got %d and %v", c.TokenizeConcurrency, c.TokenizeQueueTimeout))
	}
	if _, _, err := ParseMemoryLimit(c.MemoryLimit); err != nil {
		errs = append(errs, err)
	}
	if !(c.ProcsPerCPU >= 1 && c.ProcsPerCPU <= MaxProcsPerCPU) {
		errs = append(errs, fmt.Errorf("procs-per-cpu must be in [1, %d], got %v", MaxProcsPerCPU, c.ProcsPerCPU))
	}
	if c.GCPercent < 0 {
		errs = append(errs, fmt.Errorf("gc-percent must be >= 0, got %d", c.GCPercent))
	}
	if c.ClusterMinMembers < 0 {
		errs = append(errs, fmt.Errorf("cluster-min-members must be >= 0 (0 = from the seeds), got %d", c.ClusterMinMembers))
	}
	errs = append(errs, c.validateDiscovery()...)
	errs = append(errs, c.validateSessions()...)
	// The cluster package's own rules, so a batch setting the flags accept
	// is one cluster.Start accepts.
	if err := cluster.CheckBatchMaxEvents(c.ClusterBatchMaxEvents); err != nil {
		errs = append(errs, fmt.Errorf("cluster-batch-max-events: %w", err))
	}
	if err := cluster.CheckBatchInterval(c.ClusterBatchInterval); err != nil {
		errs = append(errs, fmt.Errorf("cluster-batch-interval: %w", err))
	}
	if err := c.CheckClusterSecurity(); err != nil {
		errs = append(errs, err)
	}
	ac := c.Actors()
	if err := ac.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CheckClusterSecurity refuses unauthenticated gossip on a non-loopback
// --cluster-bind unless --cluster-insecure says so, and a partial set of
// --cluster-tls-* files. (A malformed --cluster-bind is left to the
// replica, which names it.)
func (c *Config) CheckClusterSecurity() error {
	if c.ClusterBind == "" {
		return nil
	}
	if (c.ClusterTLSCert == "") != (c.ClusterTLSKey == "") || (c.ClusterTLSCert == "") != (c.ClusterTLSCA == "") {
		return errors.New("--cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca go together")
	}
	host, _, err := net.SplitHostPort(c.ClusterBind)
	ip := net.ParseIP(host)
	if err != nil || ip == nil || ip.IsLoopback() || c.ClusterKeyFile != "" || c.ClusterInsecure {
		return nil
	}
	return fmt.Errorf("--cluster-bind %s is not a loopback address and no --cluster-key-file is given: "+
		"anyone who can reach the gossip ports could join the cluster, read its in-flight requests and steer routing. "+
		"Generate a key (openssl rand -base64 32 > cluster.key) and give every replica --cluster-key-file cluster.key "+
		"(or %s), or pass --cluster-insecure to run unauthenticated anyway", c.ClusterBind, EnvName("cluster-key-file"))
}

// Scheduling maps the routing knobs onto the selector's config.
func (c *Config) Scheduling() scheduling.Config {
	sc := scheduling.DefaultConfig()
	if c.OverlapScoreWeight >= 0 {
		w := c.OverlapScoreWeight
		sc.OverlapScoreWeight = &w
	}
	sc.OverlapScoreCredit = c.OverlapScoreCredit
	sc.PrefillLoadScale = c.PrefillLoadScale
	sc.HostCacheHitWeight = c.HostCacheHitWeight
	sc.DiskCacheHitWeight = c.DiskCacheHitWeight
	sc.SharedCacheMultiplier = c.SharedCacheMultiplier
	sc.RouterTemperature = c.RouterTemperature
	sc.TrackPrefillTokens = c.RouterTrackPrefillTokens
	sc.AssumeKVReuse = c.RouterAssumeKVReuse
	sc.RouterQueueEnabled = c.RouterQueueThreshold >= 0
	sc.RouterQueueThreshold = max(c.RouterQueueThreshold, 0)
	sc.RouterQueuePolicy = scheduling.QueuePolicy(c.RouterQueuePolicy)
	sc.MaxQueueLength = c.RouterMaxQueueLength
	sc.RouterCost = scheduling.CostModel(c.RouterCost)
	sc.TTFT = scheduling.TTFTConfig{UncachedWeight: c.RouterTTFTUncachedWeight, KVHeadroom: c.RouterTTFTKVHeadroom,
		PrefillTokensPerSec: c.RouterPrefillTokensPerSec}
	sc.MaxLocalPrefillLength = c.MaxLocalPrefillLength
	return sc.Normalized()
}

// Actors maps the config onto one replica's actor config.
func (c *Config) Actors() actors.Config {
	ac := actors.DefaultConfig()
	ac.ReplicaID = c.ReplicaID
	ac.BlockSize = c.BlockSize
	ac.Shards = c.IndexerShards
	ac.UseKVEvents = c.UseKVEvents
	ac.Index = actors.IndexConfig{
		TTL:              time.Duration(c.RouterTTLSecs * float64(time.Second)),
		MaxTreeSize:      c.RouterMaxTreeSize,
		PruneTargetRatio: c.RouterPruneTargetRatio,
		PredictedTTL:     time.Duration(c.RouterPredictedTTLSecs * float64(time.Second)),
		HoldBlocks:       c.UnregisteredHoldBlocks,
		HoldAge:          c.UnregisteredHoldAge,
	}
	// A malformed list is Validate's error; here it declares no store.
	ac.Index.SharedStores, _ = index.ParseSharedStores(c.SharedCacheWorkers)
	ac.Trust = c.indexTrust()
	ac.Scheduling = c.Scheduling()
	ac.TrackActiveBlocks = c.RouterTrackActiveBlocks
	ac.Sequence = sequence.Config{
		TrackOutputBlocks: c.RouterTrackOutputBlocks && c.RouterTrackActiveBlocks,
		AssumeKVReuse:     c.RouterAssumeKVReuse,
		ExpiryDuration:    c.StaleRequestExpiry,
		Stride:            c.RouterActiveSequenceStride,
		Lease: sequence.LeasePolicy{
			PrefillTokenTime: c.RequestLeasePrefillToken, DecodeTokenTime: c.RequestLeaseDecodeToken,
			DefaultOutputTokens: c.RequestLeaseDefaultOutput, Min: c.RequestLeaseMin,
		},
	}
	ac.DefaultMaxNumBatchedTokens = c.MaxNumBatchedTokens
	ac.DecisionTimeout = c.DecisionTimeout
	ac.MaxQueueWait = c.RouterMaxQueueWait
	ac.DecisionSample, ac.DecisionRingEntries, ac.DecisionRingBytes = c.DecisionSample, c.DecisionRingEntries, c.DecisionRingBytes
	if c.policy != nil {
		ac.Pipeline, ac.Models = c.policy.def, c.policy.models
	}
	ac.HeartbeatTimeout = c.HeartbeatTimeout
	ac.DrainGrace = c.DrainGrace
	ac.MaxWorkers, ac.MaxRanks = c.MaxWorkers, c.MaxRanks
	ac.ShardBacklog, ac.BackpressureWait, ac.ReplicationBacklog = c.ShardBacklog, c.BackpressureWait, c.ReplicationBacklog
	ac.Sessions = sessions.Config{TTL: c.SessionTTL, MaxSessions: c.MaxSessions, MaxIDBytes: c.MaxSessionIDBytes}
	ac.Limits = scheduling.Limits{
		MaxPromptTokens: c.MaxPromptTokens, MaxRequestIDBytes: c.MaxRequestIDBytes, MaxActiveRequests: c.MaxActiveRequests,
		MaxActiveRequestsPerClient: c.MaxActiveRequestsPerClient,
	}
	return ac
}

// maxMigrationLimit bounds --migration-limit: every migration re-sends
// the prompt and the text so far to another engine.
const maxMigrationLimit = 16
