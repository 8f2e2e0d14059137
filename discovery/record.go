// Package discovery finds engines that never heartbeat — plain vLLM and
// SGLang behind a headless Service, Kubernetes pods, a Gateway API
// Inference Extension InferencePool — and keeps the router's registry in
// step with them.
//
// A Source emits the full set of engines it sees (Records) whenever it
// looks (DNS) or is told (Kubernetes informers); the Reconciler (pure)
// diffs each source's sets and plans registrations, drains (engines gone
// from every source: no new routes, requests in flight finish, removed
// after the drain grace) and readiness changes; the Manager applies the
// plans to a Fleet (the replica: RegisterWorker, SetWorkerCondition, ZMQ
// subscriptions) and folds in the engine poller's health verdicts.
//
// Worker ids are derived from the engine's identity (pod UID, or address
// and port), so every replica running the same sources independently
// reaches the same registry.
package discovery

import (
	"fmt"
	"net"
	"slices"
	"strconv"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/kv"
)

// Record is one engine as a source sees it: everything the router needs
// to route to it and read its KV events.
type Record struct {
	// Key is the engine's identity ("k8s-pod/<uid>", "dns/<ip>:<port>");
	// ID is derived from it (WorkerID).
	Key string
	ID  kv.WorkerID
	// Name is a human-readable name for logs (pod name, address).
	Name string
	URL  string // http://host:port
	// DPSize is the engine's data-parallel size (ranks 0..DPSize-1).
	DPSize uint32
	// BlockSize is the block size the engine declares (0: not declared).
	BlockSize uint32
	// KVEventsEndpoint and ReplayEndpoint are the engine's ZMQ publisher
	// and replay socket of dp rank 0 ("" = none).
	KVEventsEndpoint string
	ReplayEndpoint   string
	Models           []string
	// Ready is false for an engine that is present but not serving (a
	// pod that is not Ready): registered, but unhealthy.
	Ready bool
	// Role is the engine's pool in a disaggregated fleet (role option,
	// kvrouter.io/role annotation or llm-d's llm-d.ai/role label).
	Role kv.Role
}

// WorkerID derives a worker id from an engine's identity: the same on
// every replica, below 2^63 (systems that store ids as signed 64-bit
// integers read it unchanged) and never 0.
func WorkerID(key string) kv.WorkerID {
	return kv.WorkerID(xxh3.HashString(key)>>1 | 1)
}

func (r Record) String() string {
	return fmt.Sprintf("%s (worker %d, %s)", r.Name, r.ID, r.URL)
}

// same reports whether two records would register the same worker (all
// but readiness, which is a condition, not a registration).
func (r Record) same(o Record) bool {
	return r.Key == o.Key && r.ID == o.ID && r.Name == o.Name && r.URL == o.URL && r.DPSize == o.DPSize &&
		r.BlockSize == o.BlockSize && r.KVEventsEndpoint == o.KVEventsEndpoint &&
		r.ReplayEndpoint == o.ReplayEndpoint && slices.Equal(r.Models, o.Models) && r.Role == o.Role
}

// Defaults fill what a source cannot see: per source from its URI query,
// per pod from annotations.
type Defaults struct {
	// KVEventsPort is the engine's ZMQ KV-event port (vLLM's 5557); 0 =
	// the engine publishes none.
	KVEventsPort int
	// ReplayPort is its ZMQ replay port (5558); 0 = none.
	ReplayPort int
	DPSize     uint32
	BlockSize  uint32
	Model      string
	Role       kv.Role
}

// DefaultDefaults are vLLM's: KV events on 5557, replay on 5558, dp 1.
func DefaultDefaults() Defaults { return Defaults{KVEventsPort: 5557, ReplayPort: 5558, DPSize: 1} }

// record builds a Record for an engine at host:port.
func (d Defaults) record(key, name, host string, port int) Record {
	r := Record{Key: key, ID: WorkerID(key), Name: name, URL: "http://" + joinHostPort(host, port),
		DPSize: max(d.DPSize, 1), BlockSize: d.BlockSize, Ready: true, Role: d.Role}
	if d.KVEventsPort > 0 {
		r.KVEventsEndpoint = "tcp://" + joinHostPort(host, d.KVEventsPort)
	}
	if d.ReplayPort > 0 {
		r.ReplayEndpoint = "tcp://" + joinHostPort(host, d.ReplayPort)
	}
	if d.Model != "" {
		r.Models = []string{d.Model}
	}
	return r
}

func joinHostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
