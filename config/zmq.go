package config

import (
	"fmt"
	"math"
	"time"

	"github.com/kvrouter/kvrouter/internal/redial"
	"github.com/kvrouter/kvrouter/zmqevents"
)

// ZMQRedial is each ZMQ rank's reconnect backoff.
func (c *Config) ZMQRedial() redial.Policy {
	p := redial.DefaultPolicy()
	p.Base, p.Max = c.ZMQReconnectBase, c.ZMQReconnectMax
	return p
}

// ZMQConnectLimiter is the connection-rate cap every ZMQ rank shares (a
// rate of 0 never waits).
func (c *Config) ZMQConnectLimiter() *redial.Limiter {
	return redial.NewLimiter(c.ZMQConnectRate, int(max(1, math.Ceil(4*c.ZMQConnectRate))), nil)
}

func (c *Config) validateZMQ() []error {
	var errs []error
	if err := c.ZMQRedial().Validate(); err != nil {
		errs = append(errs, fmt.Errorf("zmq-reconnect-base %v and zmq-reconnect-max %v: %w", c.ZMQReconnectBase, c.ZMQReconnectMax, err))
	}
	if c.ZMQConnectRate < 0 || math.IsNaN(c.ZMQConnectRate) || math.IsInf(c.ZMQConnectRate, 0) {
		errs = append(errs, fmt.Errorf("zmq-connect-rate must be >= 0, got %v", c.ZMQConnectRate))
	}
	return errs
}

// zmqDefaults are the reconnect defaults (see zmqevents and redial).
var zmqDefaults = struct {
	base, max time.Duration
	rate      float64
}{redial.DefaultPolicy().Base, redial.DefaultPolicy().Max, zmqevents.DefaultConnectRate}
