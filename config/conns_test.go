package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestConnSettings(t *testing.T) {
	c := Default()
	c.ConnLimitExempt = []string{"10.0.0.0/8", "192.0.2.7", "[2001:db8::1]", " "}
	got, err := c.ConnExemptPrefixes()
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("2001:db8::1/128")}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("exempt %v, %v; want %v", got, err, want)
	}
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.ConnLimitExempt = []string{"lb.local"} }, "conn-limit-exempt entry"},
		{func(c *Config) { c.ConnLimitExempt = []string{"10.0.0.0/33"} }, "not a CIDR"},
		{func(c *Config) { c.HTTPMaxConnsPerClient = -1 }, "http-max-conns-per-client"},
		{func(c *Config) { c.GRPCMaxConnsPerClient = -1 }, "grpc-max-conns-per-client"},
		{func(c *Config) { c.UnauthIdleTimeout = -1 }, "unauthenticated-idle-timeout"},
	} {
		c := Default()
		tc.set(&c)
		if errs := c.validateConns(); len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
			t.Errorf("want one error naming %q, got %v", tc.want, errs)
		}
	}
	def := Default()
	if errs := def.validateConns(); len(errs) != 0 {
		t.Fatalf("defaults: %v", errs)
	}
}

// Ranks past 2^32-1 are refused, as a heartbeat's are.
func TestStaticWorkerRanksFitUint32(t *testing.T) {
	if _, err := ParseStaticWorkers([]string{"1=http://h:1@4294967295:2"}); err == nil || !strings.Contains(err.Error(), "uint32") {
		t.Fatalf("ranks past 2^32-1: %v", err)
	}
	if _, err := ParseStaticWorkers([]string{"1=http://h:1@4294967295:1"}); err != nil {
		t.Fatalf("the last rank alone: %v", err)
	}
}
