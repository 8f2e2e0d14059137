package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/netpolicy"
)

// validateHTTP checks the HTTP listener, security and timeout settings.
func (c *Config) validateHTTP() []error {
	var errs []error
	if c.AdminAddr != "" && c.AdminAddr == c.HTTPAddr && !strings.HasSuffix(c.AdminAddr, ":0") {
		errs = append(errs, fmt.Errorf("admin-addr must differ from http-addr (%s)", c.HTTPAddr))
	}
	if _, err := netpolicy.Parse(c.WorkerURLAllow); err != nil {
		errs = append(errs, err)
	}
	for name, d := range map[string]time.Duration{
		"http-read-header-timeout": c.HTTPReadHeaderTimeout, "http-read-timeout": c.HTTPReadTimeout,
		"http-write-timeout": c.HTTPWriteTimeout, "http-idle-timeout": c.HTTPIdleTimeout,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must be >= 0, got %v", name, d))
		}
	}
	if c.HTTPReadHeaderTimeout == 0 {
		errs = append(errs, errors.New("http-read-header-timeout must be > 0: without it a client that never finishes its headers holds a connection forever"))
	}
	if c.HTTPIdleTimeout == 0 {
		errs = append(errs, errors.New("http-idle-timeout must be > 0: without it idle keep-alive connections are held forever"))
	}
	if c.GRPCAddr != "" && (c.GRPCAddr == c.HTTPAddr || c.GRPCAddr == c.AdminAddr) && !strings.HasSuffix(c.GRPCAddr, ":0") {
		errs = append(errs, fmt.Errorf("grpc-addr must differ from http-addr and admin-addr (%s)", c.GRPCAddr))
	}
	if c.GRPCMaxConns < 0 {
		errs = append(errs, fmt.Errorf("grpc-max-conns must be >= 0, got %d", c.GRPCMaxConns))
	}
	if c.GRPCMaxStreams <= 0 || c.GRPCMaxStreams > 1<<20 {
		errs = append(errs, fmt.Errorf("grpc-max-streams must be in 1..%d, got %d", 1<<20, c.GRPCMaxStreams))
	}
	if c.GRPCStreamInFlight <= 0 {
		errs = append(errs, fmt.Errorf("grpc-stream-inflight must be > 0, got %d", c.GRPCStreamInFlight))
	}
	if c.HTTPMaxConns < 0 {
		errs = append(errs, fmt.Errorf("http-max-conns must be >= 0, got %d", c.HTTPMaxConns))
	}
	return errs
}
