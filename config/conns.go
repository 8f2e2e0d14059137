package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Defaults of the fair-slot settings. One address may hold an eighth of
// the HTTP listener's default 8,192 connections and a sixteenth of the
// gRPC listener's 1,024 (a gRPC client multiplexes its calls on one or a
// few connections); a load balancer that carries many clients belongs in
// conn-limit-exempt. Ten seconds is the HTTP header timeout's default: a
// client that authenticates has no reason to idle longer before it does.
const (
	DefaultHTTPMaxConnsPerClient = 1024
	DefaultGRPCMaxConnsPerClient = 64
	DefaultUnauthIdleTimeout     = 10 * time.Second
)

// validateConns checks the per-client caps and the exempt list.
func (c *Config) validateConns() []error {
	var errs []error
	if c.HTTPMaxConnsPerClient < 0 {
		errs = append(errs, fmt.Errorf("http-max-conns-per-client must be >= 0, got %d", c.HTTPMaxConnsPerClient))
	}
	if c.GRPCMaxConnsPerClient < 0 {
		errs = append(errs, fmt.Errorf("grpc-max-conns-per-client must be >= 0, got %d", c.GRPCMaxConnsPerClient))
	}
	if c.UnauthIdleTimeout < 0 {
		errs = append(errs, fmt.Errorf("unauthenticated-idle-timeout must be >= 0, got %v", c.UnauthIdleTimeout))
	}
	if _, err := c.ConnExemptPrefixes(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// ConnExemptPrefixes parses conn-limit-exempt (an IP is its own /32 or
// /128).
func (c *Config) ConnExemptPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, raw := range c.ConnLimitExempt {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		if strings.Contains(e, "/") {
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("conn-limit-exempt entry %q: not a CIDR: %w", raw, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(strings.Trim(e, "[]"))
		if err != nil {
			return nil, fmt.Errorf("conn-limit-exempt entry %q: want a CIDR or an IP", raw)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
