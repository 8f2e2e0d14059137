package config

import (
	"fmt"

	"github.com/kvrouter/kvrouter/discovery"
	"github.com/kvrouter/kvrouter/enginepoll"
	"github.com/kvrouter/kvrouter/scheduling"
)

// --engine-poll values.
const (
	EnginePollDiscovered = "discovered"
	EnginePollAll        = "all"
	EnginePollOff        = "off"
)

// DefaultEngineWaitingThreshold: an engine holding more requests in its
// own waiting queue is busy. 128 is the waiting-queue threshold of the
// Gateway API Inference Extension's (llm-d's) load-aware scorer.
const DefaultEngineWaitingThreshold = 128

func (c *Config) validateDiscovery() []error {
	var errs []error
	if len(c.Discover) > 0 && c.DiscoverInterval <= 0 {
		errs = append(errs, fmt.Errorf("discover-interval must be > 0, got %v", c.DiscoverInterval))
	}
	if _, err := c.DiscoverySources(); err != nil {
		errs = append(errs, err)
	}
	if c.DrainGrace < 0 {
		errs = append(errs, fmt.Errorf("drain-grace must be >= 0, got %v", c.DrainGrace))
	}
	switch c.EnginePoll {
	case EnginePollDiscovered, EnginePollAll, EnginePollOff:
	default:
		errs = append(errs, fmt.Errorf("engine-poll %q: want %s, %s or %s", c.EnginePoll, EnginePollDiscovered, EnginePollAll, EnginePollOff))
	}
	if c.EnginePoll != EnginePollOff {
		if err := c.EnginePollOptions().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// DiscoverySources builds the --discover sources (nothing connects until
// they run).
func (c *Config) DiscoverySources() ([]discovery.Source, error) {
	var out []discovery.Source
	seen := map[string]bool{}
	for _, uri := range c.Discover {
		if seen[uri] {
			return nil, fmt.Errorf("--discover %q given twice", uri)
		}
		seen[uri] = true
		s, err := discovery.Parse(uri, discovery.Options{Interval: c.DiscoverInterval, Kubeconfig: c.Kubeconfig, Kube: c.KubeClients})
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// EnginePollOptions maps the engine-poll flags onto the poller's options
// (the callback and logger are the replica's).
func (c *Config) EnginePollOptions() enginepoll.Options {
	o := enginepoll.DefaultOptions()
	o.Interval, o.Timeout, o.MaxBackoff = c.EnginePollInterval, c.EnginePollTimeout, c.EnginePollMaxBackoff
	o.FailureThreshold = c.EngineUnhealthyThreshold
	o.Thresholds = scheduling.BusyThresholds{KVUsage: c.ActiveDecodeBlocksThreshold, Waiting: c.EngineWaitingThreshold}
	o.Metrics = true
	return o
}
