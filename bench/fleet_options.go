package bench

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/scheduling"
)

// FleetOptions describes the embedded fleet a sweep starts per point.
type FleetOptions struct {
	// Workers is the number of mock workers.
	Workers int
	// Replicas is the number of router replicas (a memberlist cluster
	// when above 1; the client spreads requests over them round-robin).
	Replicas int
	// BlockSize is shared by the router and every worker.
	BlockSize int
	// Stride and BatchInterval are the replicas'
	// router-active-sequence-stride and cluster-batch-interval (0 keeps
	// the router's defaults).
	Stride        int
	BatchInterval time.Duration
	// Engine is every worker's engine config; WorkerID and BlockSize are
	// filled in per worker.
	Engine mockengine.Config
	// Preset names the mock-engine preset Engine was derived from ("" for
	// the mock engine's defaults), for reports.
	Preset string
	Logger *slog.Logger

	// Discovery is how the router finds the workers: "" (heartbeats and
	// KV events on NATS) or DiscoveryDNS (plain engines on their own
	// loopback addresses, found by resolving a name, KV events on ZMQ).
	Discovery string

	// Disagg is "P:D": the fleet's first P workers are prefill workers,
	// the next D decode workers (Workers becomes P+D); "" = every worker
	// does both (aggregated).
	Disagg string
	// MaxLocalPrefillLength is the router's max-local-prefill-length
	// (disaggregated fleets).
	MaxLocalPrefillLength uint64
}

// Pools parses Disagg: the prefill and decode worker counts (0, 0 when
// the fleet is aggregated).
func (o FleetOptions) Pools() (prefill, decode int, err error) {
	if o.Disagg == "" {
		return 0, 0, nil
	}
	if _, err := fmt.Sscanf(o.Disagg, "%d:%d", &prefill, &decode); err != nil || prefill < 1 || decode < 1 ||
		fmt.Sprintf("%d:%d", prefill, decode) != o.Disagg {
		return 0, 0, fmt.Errorf("--disagg %q: want P:D, two positive worker counts", o.Disagg)
	}
	return prefill, decode, nil
}

// role is worker i's (0-based) role in the fleet.
func (o FleetOptions) role(i int) kv.Role {
	p, _, err := o.Pools()
	switch {
	case err != nil || o.Disagg == "":
		return kv.RoleBoth
	case i < p:
		return kv.RolePrefill
	}
	return kv.RoleDecode
}

// Register binds the fleet's flags, defaulting to the mock engine's
// defaults (and DefaultSpeedup).
func (o *FleetOptions) Register(fs *flag.FlagSet) {
	o.Engine = mockengine.DefaultConfig()
	o.Engine.Speedup = DefaultSpeedup
	o.register(fs)
}

// RegisterPreset binds the fleet's flags with a mock-engine preset's
// values as their defaults: the --preset found in args (the command
// line, scanned before parsing), else fallback ("" = the mock engine's
// defaults). A preset runs at real speed (--speedup 1). Engine flags
// given explicitly still win over the preset, --speedup included.
func (o *FleetOptions) RegisterPreset(fs *flag.FlagSet, args []string, fallback string) error {
	preset, found := mockengine.PresetArg(args)
	if !found {
		preset = fallback
	}
	o.Engine = mockengine.DefaultConfig()
	o.Engine.Speedup = DefaultSpeedup
	if preset != "" {
		cfg, err := mockengine.Preset(preset)
		if err != nil {
			return err
		}
		// A preset is a real GPU's figures: it runs at real speed
		// unless --speedup says otherwise.
		cfg.Speedup = 1
		o.Engine = cfg
	}
	o.Preset = preset
	o.register(fs)
	return nil
}

// DefaultSpeedup is --speedup without a preset: simulated time runs 10×
// faster than real time. With a --preset the default is 1 (real speed).
const DefaultSpeedup = 10

func (o *FleetOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.Preset, "preset", o.Preset, "mock engine preset derived from public numbers (the engine flags' defaults): "+
		strings.Join(mockengine.Presets(), ", ")+"; empty = the mock engine's own defaults")
	if o.BlockSize == 0 {
		o.BlockSize = o.Engine.BlockSize
	}
	fs.IntVar(&o.Workers, "workers", 8, "mock workers in the fleet")
	fs.StringVar(&o.Discovery, "discovery", "", "how the router finds the workers: empty = NATS heartbeats and events; dns = plain engines (no heartbeats, KV events on ZMQ) on 127.0.0.2, 127.0.0.3, ... found by resolving a name at a DNS server on loopback (--discover dns://...)")
	fs.IntVar(&o.Replicas, "replicas", 1, "router replicas (a memberlist cluster when > 1; requests spread over them round-robin)")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "KV block size of the router and the workers")
	fs.IntVar(&o.Stride, "router-active-sequence-stride", 0, "router replicas: one sequence hash per N blocks in the active-sequence tracker and its gossip (0 = the router's default)")
	fs.DurationVar(&o.BatchInterval, "cluster-batch-interval", 0, "router replicas: longest a gossip batch waits (0 = the router's default)")
	fs.Float64Var(&o.Engine.Speedup, "speedup", o.Engine.Speedup, "mock engine: simulated time runs this many times faster than real time (10 without a --preset; a preset's figures are a real GPU's, so with one the default is 1, real speed; an explicit --speedup wins either way)")
	fs.Float64Var(&o.Engine.PrefillTokensPerSec, "prefill-tokens-per-sec", o.Engine.PrefillTokensPerSec, "mock engine: prompt tokens processed per simulated second")
	fs.IntVar(&o.Engine.TotalKVBlocks, "kv-blocks", o.Engine.TotalKVBlocks, "mock engine: KV cache capacity per worker, in blocks")
	fs.IntVar(&o.Engine.MaxNumSeqs, "max-num-seqs", o.Engine.MaxNumSeqs, "mock engine: running requests per worker")
	fs.IntVar(&o.Engine.MaxNumBatchedTokens, "max-num-batched-tokens", o.Engine.MaxNumBatchedTokens, "mock engine: tokens per step (prefill chunk plus decodes)")
	fs.DurationVar(&o.Engine.StepBaseTime, "step-base-time", o.Engine.StepBaseTime, "mock engine: simulated cost of every step (reading the weights)")
	fs.DurationVar(&o.Engine.DecodeTimePerSeq, "decode-time-per-seq", o.Engine.DecodeTimePerSeq, "mock engine: simulated step cost per decoding request")
	fs.Float64Var(&o.Engine.DecodeKVTokensPerSec, "decode-kv-tokens-per-sec", o.Engine.DecodeKVTokensPerSec, "mock engine: KV tokens a decode step reads per simulated second (0 = context length costs nothing)")
	fs.StringVar(&o.Disagg, "disagg", "", "P:D: a disaggregated fleet of P prefill and D decode workers (overrides --workers); empty = aggregated")
	fs.Float64Var(&o.Engine.KVTransferGbps, "kv-transfer-gbps", o.Engine.KVTransferGbps, "mock engine: KV transfer bandwidth between prefill and decode workers, Gb per simulated second")
	o.MaxLocalPrefillLength = scheduling.DefaultMaxLocalPrefillLength
	fs.Uint64Var(&o.MaxLocalPrefillLength, "max-local-prefill-length", o.MaxLocalPrefillLength, "router: with --disagg, prompts with at most this many tokens uncached on the decode worker are prefilled there")
}

// Finish applies --disagg to the worker count; call it after parsing.
func (o *FleetOptions) Finish() error {
	p, d, err := o.Pools()
	if err == nil && o.Disagg != "" {
		o.Workers = p + d
	}
	return err
}

// Validate checks the options before anything is started.
func (o FleetOptions) Validate() error {
	if o.Workers <= 0 {
		return fmt.Errorf("fleet needs at least one worker, got %d", o.Workers)
	}
	if o.Replicas < 0 {
		return fmt.Errorf("replicas must be >= 0, got %d", o.Replicas)
	}
	if o.Discovery != "" && o.Discovery != DiscoveryDNS {
		return fmt.Errorf("discovery %q: want empty or %s", o.Discovery, DiscoveryDNS)
	}
	p, d, err := o.Pools()
	if err != nil {
		return err
	}
	if o.Disagg != "" && p+d != o.Workers {
		return fmt.Errorf("--disagg %s is %d workers, the fleet has %d (call Finish after parsing)", o.Disagg, p+d, o.Workers)
	}
	if o.Disagg != "" && o.Discovery != "" {
		return errors.New("--disagg needs heartbeats (the roles travel in them): not with --discovery")
	}
	e := o.Engine
	e.BlockSize = o.BlockSize
	if err := e.Validate(); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	if o.BlockSize <= 0 {
		return errors.New("block size must be > 0")
	}
	return nil
}

// OracleFleet describes the fleet to the capacity- and time-bounded
// oracles: every rank's cache and the engines' idle prefill timing.
func (o FleetOptions) OracleFleet() OracleFleet {
	e := o.Engine
	return OracleFleet{
		Ranks:               o.Workers * max(e.DPSize, 1),
		BlockSize:           o.BlockSize,
		CacheBlocks:         e.TotalKVBlocks,
		PrefillTokensPerSec: e.PrefillTokensPerSec,
		StepBaseTime:        e.StepBaseTime,
		MaxBatchedTokens:    e.MaxNumBatchedTokens,
		Speedup:             e.Speedup,
	}
}
