package main

import (
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// envPrefix prefixes the environment variable of every flag.
const envPrefix = "MOCKWORKER_"

// envName maps a flag to its environment variable: block-size →
// MOCKWORKER_BLOCK_SIZE.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// options is everything the command is configured with.
type options struct {
	httpAddr        string
	natsURL         string
	kvEventsSubject string
	workersSubject  string
	// kvEvents is the KV event transport: "nats" (Dynamo RouterEvent
	// JSON) or "zmq" (vLLM's ZMQ + msgpack format; heartbeats stay on
	// NATS when --nats-url is set).
	kvEvents          string
	zmqEndpoint       string
	zmqReplayEndpoint string
	zmqEncoding       zmqevents.Encoding
	zmqWire           mockengine.ZMQWire
	logLevel          slog.Level
	workerID          uint64
	server            mockengine.ServerConfig
}

// parseOptions reads flags over environment variables over defaults.
func parseOptions(args []string, getenv func(string) string, usageOut io.Writer) (options, error) {
	o := options{server: mockengine.DefaultServerConfig()}
	e := &o.server.Engine
	// A preset (flag or environment) sets the engine flags' defaults;
	// engine flags given explicitly still win.
	preset, found := mockengine.PresetArg(args)
	if !found {
		preset = getenv(envName("preset"))
	}
	if preset != "" {
		cfg, err := mockengine.Preset(preset)
		if err != nil {
			return o, err
		}
		*e = cfg
	}
	fs := flag.NewFlagSet("mockworker", flag.ContinueOnError)
	fs.String("preset", preset, "engine preset derived from public numbers, the engine flags' defaults: "+strings.Join(mockengine.Presets(), ", ")+" (empty: the mock engine's own defaults)")
	fs.SetOutput(usageOut)
	fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:0", "listen address of the completions API (port 0 picks one; the URL is printed on stdout)")
	fs.Uint64Var(&o.workerID, "worker-id", 0, "worker id in KV events and heartbeats (0 picks a random one)")
	fs.StringVar(&o.natsURL, "nats-url", "", "NATS server for KV events and heartbeats (empty: publish nothing)")
	fs.StringVar(&o.kvEventsSubject, "kv-events-subject", "kvrouter.kv_events", "subject of KV events")
	fs.StringVar(&o.workersSubject, "workers-subject", "kvrouter.workers", "subject of heartbeats")
	fs.StringVar(&o.kvEvents, "kv-events", "nats", "KV event transport: nats (RouterEvent JSON) or zmq (vLLM wire format)")
	fs.StringVar(&o.zmqEndpoint, "zmq-endpoint", "tcp://*:5557", "with --kv-events zmq: PUB bind address of dp rank 0 (rank i adds i to the port)")
	fs.StringVar(&o.zmqReplayEndpoint, "zmq-replay-endpoint", "tcp://*:5558", "with --kv-events zmq: replay ROUTER bind address of rank 0 (empty: no replay)")
	zmqEncoding := fs.String("zmq-encoding", "array", "with --kv-events zmq: array (vLLM <= 0.23) or map (newer vLLM) msgpack layout")
	zmqWire := fs.String("zmq-wire", "", "with --kv-events zmq: engine forms to publish, comma-separated: lora=NAME[:ID], lora-id=ID, unknown=TYPE, eagle, sglang-pages, short-page=N, block-size=N")
	fs.DurationVar(&o.server.HeartbeatInterval, "heartbeat-interval", o.server.HeartbeatInterval, "period of heartbeats")
	fs.StringVar(&o.server.PublicURL, "public-url", "", "URL announced in heartbeats (default http://<listen address>)")
	fs.DurationVar(&o.server.ShutdownGrace, "shutdown-grace", o.server.ShutdownGrace, "how long requests in flight may finish after SIGTERM")
	fs.StringVar(&o.server.MetricsFlavor, "metrics-flavor", mockengine.MetricsVLLM, "load metric names on /metrics: vllm (vllm:num_requests_waiting, ...) or sglang (sglang:num_queue_reqs, ...)")
	fs.StringVar(&e.ModelName, "model-name", e.ModelName, "model name reported in responses, metrics and heartbeats")
	fs.IntVar(&e.BlockSize, "block-size", e.BlockSize, "tokens per KV block (must match the router)")
	fs.IntVar(&e.TotalKVBlocks, "total-kv-blocks", e.TotalKVBlocks, "KV cache capacity of each dp rank, in blocks")
	fs.IntVar(&e.DPSize, "dp-size", e.DPSize, "data-parallel ranks, each with its own cache and scheduler")
	fs.IntVar(&e.MaxNumSeqs, "max-num-seqs", e.MaxNumSeqs, "running requests per rank")
	fs.IntVar(&e.MaxNumBatchedTokens, "max-num-batched-tokens", e.MaxNumBatchedTokens, "tokens per step per rank (prefill chunk plus decodes)")
	fs.Float64Var(&e.PrefillTokensPerSec, "prefill-tokens-per-s", e.PrefillTokensPerSec, "prompt tokens processed per simulated second")
	fs.DurationVar(&e.StepBaseTime, "step-base-time", e.StepBaseTime, "fixed simulated cost of every step")
	fs.DurationVar(&e.DecodeTimePerSeq, "decode-time-per-seq", e.DecodeTimePerSeq, "extra simulated step cost per decoding request")
	fs.Float64Var(&e.DecodeKVTokensPerSec, "decode-kv-tokens-per-s", e.DecodeKVTokensPerSec, "KV-cache tokens a decode step reads per simulated second (0: context length costs nothing)")
	fs.Float64Var(&e.Speedup, "speedup", e.Speedup, "simulated time runs this many times faster than real time")
	role := fs.String("role", "both", "part in disaggregated serving, announced in heartbeats: prefill (answers do_remote_decode requests with kv_transfer_params, holds the blocks until pulled), decode (pulls the blocks of do_remote_prefill requests, charging --kv-transfer-gbps) or both")
	fs.Float64Var(&e.KVTransferGbps, "kv-transfer-gbps", e.KVTransferGbps, "KV transfer bandwidth between prefill and decode workers, gigabits per simulated second (0: free)")
	fs.Float64Var(&e.KVBytesPerToken, "kv-bytes-per-token", e.KVBytesPerToken, "KV cache bytes per token a transfer moves (a preset sets its model's)")
	fs.DurationVar(&o.server.KVHoldTimeout, "kv-hold-timeout", o.server.KVHoldTimeout, "prefill role: release blocks no decode worker pulled after this long")
	tokPath := fs.String("tokenizer", "", "tokenizer.json or model directory (with tokenizer_config.json / chat_template.jinja): take text prompts and chat messages as vLLM does, and publish KV events of the tokens computed (empty: token ids only)")
	chatEngine := fs.String("chat-engine", "vllm", "with --tokenizer: the engine whose chat preprocessing the worker applies before the template: vllm or sglang")
	chatMismatch := fs.String("chat-mismatch", "none", "with --tokenizer: render chats differently from --chat-engine on purpose, to test a router's parity detection: none, raw-messages (no message preprocessing) or template (another template: --chat-mismatch-template, else the model's with a prefix)")
	mismatchTemplate := fs.String("chat-mismatch-template", "", "with --chat-mismatch template: a file with the Jinja template the worker renders chats with")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage = fmt.Sprintf("%s (env %s)", f.Usage, envName(f.Name))
	})
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("environment %s=%q: %w", envName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return o, envErr
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := o.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return o, fmt.Errorf("log level: %w", err)
	}
	enc, err := zmqevents.ParseEncoding(*zmqEncoding)
	if err != nil {
		return o, err
	}
	o.zmqEncoding = enc
	if o.zmqWire, err = mockengine.ParseZMQWire(*zmqWire); err != nil {
		return o, fmt.Errorf("--zmq-wire: %w", err)
	}
	switch o.kvEvents {
	case "nats":
	case "zmq":
		if o.zmqEndpoint == "" {
			return o, fmt.Errorf("--kv-events zmq needs --zmq-endpoint")
		}
	default:
		return o, fmt.Errorf("--kv-events %q: want nats or zmq", o.kvEvents)
	}
	if o.natsURL != "" && (o.kvEventsSubject == "" || o.workersSubject == "") {
		return o, fmt.Errorf("with --nats-url, --kv-events-subject and --workers-subject must not be empty")
	}
	if o.server.Role, err = kv.ParseRole(*role); err != nil {
		return o, err
	}
	if o.workerID == 0 {
		o.workerID = randomWorkerID()
	}
	e.WorkerID = kv.WorkerID(o.workerID)
	if err := o.server.Validate(); err != nil {
		return o, err
	}
	if *tokPath != "" {
		tok, err := tokenizer.Load(*tokPath)
		if err != nil {
			return o, fmt.Errorf("--tokenizer: %w", err)
		}
		o.server.Tokenizer = tok
	}
	if o.server.ChatDialect, err = tokenizer.ParseDialect(*chatEngine); err != nil {
		return o, fmt.Errorf("--chat-engine: %w", err)
	}
	if o.server.ChatMismatch, err = mockengine.ParseChatMismatch(*chatMismatch); err != nil {
		return o, fmt.Errorf("--chat-mismatch: %w", err)
	}
	if *mismatchTemplate != "" {
		if o.server.ChatMismatch != mockengine.ChatMismatchTemplate {
			return o, fmt.Errorf("--chat-mismatch-template needs --chat-mismatch template")
		}
		src, err := os.ReadFile(*mismatchTemplate)
		if err != nil {
			return o, fmt.Errorf("--chat-mismatch-template: %w", err)
		}
		o.server.MismatchTemplate = string(src)
	}
	if o.server.ChatMismatch != mockengine.ChatMismatchNone && o.server.Tokenizer == nil {
		return o, fmt.Errorf("--chat-mismatch needs --tokenizer")
	}
	return o, nil
}

// randomWorkerID is a random id below 2^63, so systems that store ids as
// signed 64-bit integers (Dynamo's lease ids) read it unchanged.
func randomWorkerID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return binary.LittleEndian.Uint64(b[:])>>1 | 1
}
