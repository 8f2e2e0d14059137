package actors

import (
	"context"
	"errors"
	"fmt"
	"github.com/kvrouter/kvrouter/decide"
	"log/slog"
	"runtime"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/kvrouter/kvrouter/index"
	"github.com/kvrouter/kvrouter/messages"
	"github.com/kvrouter/kvrouter/scheduling"
	"github.com/kvrouter/kvrouter/sequence"
	"github.com/kvrouter/kvrouter/sessions"
	"github.com/kvrouter/kvrouter/trust"
)

// IndexConfig sizes approximate mode (use_kv_events=false).
type IndexConfig struct {
	TTL              time.Duration // router_ttl_secs
	MaxTreeSize      int           // router_max_tree_size
	PruneTargetRatio float64       // router_prune_target_ratio
	// PredictedTTL (router_predicted_ttl_secs): in event mode, predict a
	// routed prompt's blocks as cached on its worker for this long, until
	// the engine's own events confirm them. 0 disables.
	PredictedTTL time.Duration
	// HoldBlocks and HoldAge bound the KV events of workers that have not
	// registered: held (up to HoldBlocks blocks per replica, for up to
	// HoldAge) and applied once the worker registers, dropped and counted
	// past either bound. Events often precede a worker's first heartbeat;
	// a publisher must not grow the index with workers nobody routes to.
	HoldBlocks int
	HoldAge    time.Duration
	// SharedStores are the worker ids declared as the fleet's shared KV
	// store: their events index into the shared tier (any medium), are
	// admitted without registering, and the ids are refused as workers.
	SharedStores index.SharedStores
}

// Config is what one replica's actors need. The service's config maps
// onto it; defaults follow Dynamo.
type Config struct {
	ReplicaID   string
	BlockSize   int
	Shards      int  // indexer shards; 0 = GOMAXPROCS
	UseKVEvents bool // false = approximate mode
	// TrackActiveBlocks (router_track_active_blocks): when false, decode
	// blocks do not enter the cost.
	TrackActiveBlocks bool
	Index             IndexConfig
	Scheduling        scheduling.Config
	Sequence          sequence.Config

	// Trust rates each rank's index (exact, degraded, untrusted) and
	// scores untrusted ranks from predicted blocks; event mode only.
	Trust trust.Config

	// ShardBacklog bounds the KV events sent to one shard and not yet
	// applied; past it, ApplyEvent waits up to BackpressureWait (slowing
	// the subscription down) and then drops the event, counted.
	ShardBacklog     int
	BackpressureWait time.Duration
	// ReplicationBacklog bounds the peers' gossiped events not yet
	// applied; past it they are dropped, counted, and the anti-entropy
	// digest repairs the difference.
	ReplicationBacklog int

	// Sessions bounds the sticky-session table (TTL, size, id length);
	// its ReplicaID is taken from ReplicaID.
	Sessions sessions.Config

	// Limits bound a request's prompt and id and this replica's requests
	// in flight.
	Limits scheduling.Limits

	// MaxWorkers and MaxRanks bound the registry (0 = no bound): every
	// rank is a sequence actor, a fan-out target and metric series.
	MaxWorkers int
	MaxRanks   int

	// DefaultMaxNumBatchedTokens is the queue-threshold unit for workers
	// that do not announce their own (vLLM's default 8192).
	DefaultMaxNumBatchedTokens uint64
	// DecisionTimeout bounds how long a decision waits for shard and load
	// replies; after it, the decision is made with what arrived (a
	// missing shard's workers count as holding no overlap; a missing load
	// counts as idle) and counted as degraded.
	DecisionTimeout time.Duration
	// MaxQueueWait bounds how long a request waits in the backpressure
	// queue before it is rejected as overloaded.
	MaxQueueWait time.Duration
	// HeartbeatTimeout removes a worker whose heartbeats stopped.
	HeartbeatTimeout time.Duration
	// DrainGrace is how long a draining worker (gone from discovery) stays
	// registered, unroutable, so its requests in flight finish and are
	// freed normally; then it is removed.
	DrainGrace time.Duration
	// TickInterval drives housekeeping (timeouts, expiry, queue retries).
	TickInterval time.Duration
	// StaleCheckInterval is how often sequence actors sweep for stale
	// requests (Dynamo's CHECK_EXPIRY_FREQUENCY, 30 s).
	StaleCheckInterval time.Duration

	// Pipeline is the decision's default pipeline and Models the served
	// models' own (a policy file's; the zero value and nil: the flags'
	// DefaultPipeline for every model).
	Pipeline decide.Pipeline
	Models   map[string]decide.Pipeline
	// DecisionSample is the fraction of decisions not asked to explain
	// themselves whose route receipt is kept anyway; DecisionRingEntries
	// and DecisionRingBytes bound the replica's ring of recent receipts
	// (GET /decisions/{request_id}).
	DecisionSample      float64
	DecisionRingEntries int
	DecisionRingBytes   int

	Logger   *slog.Logger
	Observer Observer
	// Publish, when set, receives every local active-sequence change for
	// gossip to peer replicas. It must not block.
	Publish func(*messages.SequenceEvent)
	// Gossiped, when set, waits until every change Publish received so
	// far was handed to each live peer (cluster.Node.Sent). Router.Gossiped
	// calls it; nil answers at once (no cluster).
	Gossiped func(context.Context) error

	// shardMiddleware wraps every shard's Receive. Unexported: only this
	// package's tests set it, to inject crashes and stalls.
	shardMiddleware []actor.ReceiverMiddleware
	// schedulerMiddleware wraps the scheduler's Receive, as
	// shardMiddleware does the shards' (tests only).
	schedulerMiddleware []actor.ReceiverMiddleware
	// shardTurns overrides how many messages a shard handles before it
	// yields (0 = the shardTurns constant); for the ingest benchmark.
	shardTurns int
	// rngSeed, when set, seeds the scheduler's random source (tie-breaks,
	// temperature sampling) so a test's decisions repeat; tests only.
	rngSeed *[2]uint64
	// dumpChunkEntries overrides the dumpChunkEntries constant (0 = it);
	// for tests that need a dump of many chunks from a small index.
	dumpChunkEntries int
}

// Registry bounds: Dynamo's own indexer benchmark runs 7,000 workers.
const (
	DefaultMaxWorkers = 10000
	DefaultMaxRanks   = 32768
)

// DefaultDrainGrace is Kubernetes' default terminationGracePeriodSeconds:
// a pod that left its Service has that long to finish its requests.
const DefaultDrainGrace = 30 * time.Second

// DefaultConfig returns Dynamo's defaults for one replica.
func DefaultConfig() Config {
	return Config{
		ReplicaID:         "local",
		BlockSize:         16,
		UseKVEvents:       true,
		TrackActiveBlocks: true,
		Index: IndexConfig{
			TTL:              120 * time.Second,
			MaxTreeSize:      1 << 20,
			PruneTargetRatio: 0.8,
			HoldBlocks:       1 << 20,
			HoldAge:          time.Minute,
		},
		Trust:                      trust.DefaultConfig(),
		Scheduling:                 scheduling.DefaultConfig(),
		Sequence:                   sequence.DefaultConfig(),
		DefaultMaxNumBatchedTokens: 8192,
		Limits:                     scheduling.DefaultLimits(),
		Sessions: sessions.Config{TTL: sessions.DefaultTTL, MaxSessions: sessions.DefaultMaxSessions,
			MaxIDBytes: sessions.DefaultMaxIDBytes},
		ShardBacklog:       1 << 16,
		BackpressureWait:   time.Second,
		ReplicationBacklog: 1 << 16,
		MaxWorkers:         DefaultMaxWorkers,
		MaxRanks:           DefaultMaxRanks,
		DecisionTimeout:    250 * time.Millisecond,
		MaxQueueWait:       60 * time.Second,
		HeartbeatTimeout:   10 * time.Second,
		DrainGrace:         DefaultDrainGrace,
		TickInterval:       20 * time.Millisecond,
		StaleCheckInterval: 30 * time.Second,

		DecisionSample:      DefaultDecisionSample,
		DecisionRingEntries: DefaultDecisionRingEntries,
		DecisionRingBytes:   DefaultDecisionRingBytes,
	}
}

// Route receipts kept per replica: a sample of the decisions nobody
// asked to explain, in a ring of at most this many receipts and bytes.
// Building and encoding a 64-candidate receipt costs the scheduler 20 to
// 50 times the decision itself (decide's BenchmarkDecide64ExplainJSON
// against BenchmarkDecide64), so one decision in a thousand adds a few
// percent on average (docs/receipts.md).
const (
	DefaultDecisionSample      = 0.001
	DefaultDecisionRingEntries = 1024
	DefaultDecisionRingBytes   = 4 << 20
)

// Validate rejects settings the router cannot run with.
func (c *Config) Validate() error {
	var errs []error
	if c.BlockSize <= 0 {
		errs = append(errs, fmt.Errorf("block size must be > 0, got %d", c.BlockSize))
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.ShardBacklog <= 0 || c.ReplicationBacklog <= 0 || c.BackpressureWait < 0 {
		errs = append(errs, fmt.Errorf("backlogs must be > 0 and the back-pressure wait >= 0, got %d, %d, %v",
			c.ShardBacklog, c.ReplicationBacklog, c.BackpressureWait))
	}
	if c.MaxWorkers < 0 || c.MaxRanks < 0 {
		errs = append(errs, fmt.Errorf("max workers and max ranks must be >= 0 (0 = no bound), got %d and %d", c.MaxWorkers, c.MaxRanks))
	}
	if c.Shards < 0 {
		errs = append(errs, fmt.Errorf("shards must be >= 0, got %d", c.Shards))
	}
	if !(c.DecisionSample >= 0 && c.DecisionSample <= 1) {
		errs = append(errs, fmt.Errorf("decision sample must be in [0, 1], got %v", c.DecisionSample))
	}
	if c.DecisionRingEntries < 0 || c.DecisionRingBytes < 0 {
		errs = append(errs, fmt.Errorf("decision ring entries and bytes must be >= 0 (0: keep none), got %d and %d",
			c.DecisionRingEntries, c.DecisionRingBytes))
	}
	if c.DrainGrace < 0 {
		errs = append(errs, fmt.Errorf("drain grace must be >= 0, got %v", c.DrainGrace))
	}
	if c.DecisionTimeout <= 0 || c.TickInterval <= 0 {
		errs = append(errs, errors.New("decision timeout and tick interval must be > 0"))
	}
	if c.Index.PruneTargetRatio <= 0 || c.Index.PruneTargetRatio > 1 {
		errs = append(errs, fmt.Errorf("router_prune_target_ratio must be in (0,1], got %v", c.Index.PruneTargetRatio))
	}
	if c.Index.HoldBlocks <= 0 || c.Index.HoldAge <= 0 {
		errs = append(errs, fmt.Errorf("unregistered-worker event hold: blocks and age must be > 0, got %d and %v", c.Index.HoldBlocks, c.Index.HoldAge))
	}
	if c.Index.MaxTreeSize <= 0 {
		errs = append(errs, fmt.Errorf("router_max_tree_size must be > 0, got %d", c.Index.MaxTreeSize))
	}
	if c.Trust.Enabled {
		if err := c.Trust.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.sessionsConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Sequence.Validate(); err != nil {
		return err
	}
	if err := c.Scheduling.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// trustOn reports whether index trust is tracked: it needs KV events.
func (c *Config) trustOn() bool { return c.Trust.Enabled && c.UseKVEvents }

// fallbackTTL is how long a prediction lives on a rank that is not
// exact: router-predicted-ttl-secs when set, else the trust fallback's.
func (c IndexConfig) fallbackTTL(t trust.Config) time.Duration {
	if c.PredictedTTL > 0 {
		return c.PredictedTTL
	}
	return t.FallbackTTL
}

func (c *Config) shardCount() int {
	if c.Shards > 0 {
		return c.Shards
	}
	return runtime.GOMAXPROCS(0)
}

// sessionsConfig is the session table's config, written as this replica.
func (c *Config) sessionsConfig() sessions.Config {
	sc := c.Sessions
	sc.ReplicaID = c.ReplicaID
	if sc.ReplicaID == "" {
		sc.ReplicaID = "local" // a replica without an id yet (validation) or alone
	}
	return sc
}
