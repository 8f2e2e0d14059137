package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
)

// ErrNoPeers is returned when no Join entry resolved to any address.
var ErrNoPeers = errors.New("cluster: no join address resolved")

// lookupFunc resolves a host name to IP addresses (net.Resolver.LookupHost).
type lookupFunc func(ctx context.Context, host string) ([]string, error)

// resolveJoin expands the Join entries into "ip:port" addresses: a name
// that resolves to several addresses (a headless Service) yields them all.
// Entries that fail to resolve are reported in the joined error but do not
// stop the others.
func resolveJoin(ctx context.Context, lookup lookupFunc, entries []string) ([]string, error) {
	var out []string
	var errs []error
	seen := make(map[string]bool)
	for _, e := range entries {
		host, port, err := net.SplitHostPort(e)
		if err != nil {
			errs = append(errs, fmt.Errorf("join %q: %w", e, err))
			continue
		}
		ips := []string{host}
		if net.ParseIP(host) == nil {
			ips, err = lookup(ctx, host)
			if err != nil {
				errs = append(errs, fmt.Errorf("resolve %q: %w", host, err))
				continue
			}
		}
		for _, ip := range ips {
			addr := net.JoinHostPort(ip, port)
			if !seen[addr] {
				seen[addr] = true
				out = append(out, addr)
			}
		}
	}
	if len(out) == 0 && len(entries) > 0 {
		errs = append(errs, ErrNoPeers)
	}
	return out, errors.Join(errs...)
}
