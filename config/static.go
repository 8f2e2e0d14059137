package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/kv"
)

// StaticWorker is a worker registered by configuration, for setups
// without heartbeats: "id=url", "id=url@dp_start:dp_size", either with
// ";role=prefill|decode|both" appended (default both).
type StaticWorker struct {
	ID      uint64
	URL     string
	DpStart uint32
	DpSize  uint32
	Role    kv.Role
}

// ParseStaticWorkers parses the --static-workers entries.
func ParseStaticWorkers(specs []string) ([]StaticWorker, error) {
	var out []StaticWorker
	for _, spec := range specs {
		id, rest, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("static worker %q: want id=url[@dp_start:dp_size][;role=R]", spec)
		}
		var role kv.Role
		if r, opt, ok := strings.Cut(rest, ";"); ok {
			k, v, _ := strings.Cut(opt, "=")
			if k != "role" {
				return nil, fmt.Errorf("static worker %q: unknown option %q (want role=prefill|decode|both)", spec, k)
			}
			var err error
			if role, err = kv.ParseRole(v); err != nil {
				return nil, fmt.Errorf("static worker %q: %w", spec, err)
			}
			rest = r
		}
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("static worker %q: id: %w", spec, err)
		}
		w := StaticWorker{ID: n, URL: rest, DpSize: 1, Role: role}
		if url, dp, ok := strings.Cut(rest, "@"); ok {
			w.URL = url
			start, size, ok := strings.Cut(dp, ":")
			if !ok {
				return nil, fmt.Errorf("static worker %q: dp ranks: want dp_start:dp_size", spec)
			}
			s, err1 := strconv.ParseUint(start, 10, 32)
			z, err2 := strconv.ParseUint(size, 10, 32)
			if err1 != nil || err2 != nil || z == 0 {
				return nil, fmt.Errorf("static worker %q: dp ranks: want two integers, size > 0", spec)
			}
			if s+z > 1<<32 {
				return nil, fmt.Errorf("static worker %q: dp ranks %d..%d do not fit in uint32", spec, s, s+z-1)
			}
			w.DpStart, w.DpSize = uint32(s), uint32(z)
		}
		out = append(out, w)
	}
	return out, nil
}

// ZMQEndpoint is a worker whose engine publishes KV events on ZMQ, given
// by --zmq-endpoints as
// "id=tcp://host:5557[;replay=tcp://host:5558][;dp=N][;start=R][;bind]":
// dp=N ranks publish on the port and the N-1 after it, numbered from
// start=R (vLLM's data_parallel_start_rank, for an engine that hosts a
// slice of a larger data-parallel group; default 0).
type ZMQEndpoint struct {
	WorkerID    uint64
	Endpoint    string
	Replay      string
	DPSize      int
	DPStartRank uint32
	Bind        bool
}

// maxDPStartRank bounds start=R as the heartbeat's rank numbers are.
const maxDPStartRank = 1 << 20

// ParseZMQEndpoints parses the --zmq-endpoints entries.
func ParseZMQEndpoints(specs []string) ([]ZMQEndpoint, error) {
	var out []ZMQEndpoint
	for _, spec := range specs {
		id, rest, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("zmq endpoint %q: want id=tcp://host:port[;replay=...][;dp=N][;start=R][;bind]", spec)
		}
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("zmq endpoint %q: id: %w", spec, err)
		}
		parts := strings.Split(rest, ";")
		ep := ZMQEndpoint{WorkerID: n, Endpoint: parts[0], DPSize: 1}
		if ep.Endpoint == "" {
			return nil, fmt.Errorf("zmq endpoint %q: empty address", spec)
		}
		for _, p := range parts[1:] {
			switch k, v, _ := strings.Cut(p, "="); k {
			case "replay":
				ep.Replay = v
			case "dp":
				size, err := strconv.Atoi(v)
				if err != nil || size < 1 {
					return nil, fmt.Errorf("zmq endpoint %q: dp must be a positive integer", spec)
				}
				ep.DPSize = size
			case "start":
				r, err := strconv.ParseUint(v, 10, 32)
				if err != nil || r > maxDPStartRank {
					return nil, fmt.Errorf("zmq endpoint %q: start must be a rank in 0..%d", spec, maxDPStartRank)
				}
				ep.DPStartRank = uint32(r)
			case "bind":
				ep.Bind = true
			default:
				return nil, fmt.Errorf("zmq endpoint %q: unknown option %q", spec, k)
			}
		}
		out = append(out, ep)
	}
	return out, nil
}
