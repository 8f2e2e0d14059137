package zmqevents

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/kv"
)

// WorkerEndpoint says where one worker publishes its KV events.
type WorkerEndpoint struct {
	WorkerID kv.WorkerID
	// Endpoint is rank 0's PUB address, e.g. tcp://10.0.0.5:5557. With
	// Bind, it is the address the router listens on and engines connect
	// to (vLLM connects when its endpoint names a concrete host).
	Endpoint string
	// ReplayEndpoint is rank 0's replay ROUTER (vLLM replay_endpoint,
	// conventionally port 5558); empty disables gap repair.
	ReplayEndpoint string
	// DPSize is the number of data-parallel ranks (0 means 1). Rank i
	// publishes on Endpoint's port + i and replays on ReplayEndpoint's
	// port + i, as vLLM's offset_endpoint_port.
	DPSize int
	// DPStartRank is the rank number of the first port, for workers that
	// host a slice of a larger DP group.
	DPStartRank uint32
	Bind        bool
	// Topic is the SUB prefix filter; empty receives every topic.
	Topic string
}

func (w WorkerEndpoint) ranks() int { return max(w.DPSize, 1) }

// Validate checks the endpoint can be opened for every rank.
func (w WorkerEndpoint) Validate() error {
	if w.Endpoint == "" {
		return fmt.Errorf("worker %d: empty kv events endpoint", w.WorkerID)
	}
	if w.DPSize < 0 || w.DPSize > 1024 {
		return fmt.Errorf("worker %d: dp size %d out of range", w.WorkerID, w.DPSize)
	}
	last := w.ranks() - 1
	if _, err := OffsetEndpoint(w.Endpoint, last); err != nil {
		return fmt.Errorf("worker %d: %w", w.WorkerID, err)
	}
	if w.ReplayEndpoint != "" {
		if _, err := OffsetEndpoint(w.ReplayEndpoint, last); err != nil {
			return fmt.Errorf("worker %d: replay: %w", w.WorkerID, err)
		}
	}
	return nil
}

// OffsetEndpoint returns the endpoint of DP rank offset: the TCP port
// plus offset, or an "_dp<offset>" suffix for ipc and inproc paths (vLLM's
// rule). Offset 0 returns ep unchanged.
func OffsetEndpoint(ep string, offset int) (string, error) {
	scheme, addr, ok := strings.Cut(ep, "://")
	if !ok || addr == "" {
		return "", fmt.Errorf("endpoint %q is not scheme://address", ep)
	}
	switch scheme {
	case "ipc", "inproc":
		if offset == 0 {
			return ep, nil
		}
		return ep + "_dp" + strconv.Itoa(offset), nil
	case "tcp":
	default:
		return "", fmt.Errorf("endpoint %q: unsupported transport %q", ep, scheme)
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", ep, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port+offset > 65535 || (port == 0 && offset > 0) {
		return "", fmt.Errorf("endpoint %q: port %q cannot serve rank offset %d", ep, portStr, offset)
	}
	return scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port+offset)), nil
}

// listenAddress turns vLLM's wildcard bind host "*" into one Go listens on.
func listenAddress(ep string) string {
	return strings.Replace(ep, "://*:", "://0.0.0.0:", 1)
}
