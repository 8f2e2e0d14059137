package replica

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
)

// addSelfListeners adds the router's non-HTTP listeners to the worker
// address policy once they are open: the embedded NATS server's client
// port and memberlist's gossip port (TCP and UDP share it). A worker URL
// or ZMQ endpoint naming one of them is refused as the HTTP and gRPC
// listeners are. The configured addresses are added by listen(), before
// anything registers workers; this adds the ports chosen at start (":0").
func (r *Replica) addSelfListeners() {
	var hostports []string
	if r.bus != nil && r.bus.embedded != nil {
		if u, err := url.Parse(r.bus.embedded.ClientURL()); err == nil {
			hostports = append(hostports, u.Host)
			// The bind host (0.0.0.0 reaches every local address) with
			// the port the server took.
			if h, _, err := net.SplitHostPort(r.cfg.NATSListen); err == nil {
				hostports = append(hostports, net.JoinHostPort(h, u.Port()))
			}
		}
	}
	if r.cluster != nil {
		addr := r.cluster.Addr()
		hostports = append(hostports, addr)
		if _, port, err := net.SplitHostPort(addr); err == nil {
			if h, _, err := net.SplitHostPort(r.cfg.ClusterBind); err == nil {
				hostports = append(hostports, net.JoinHostPort(h, port))
			}
		}
	}
	r.policy.AddSelf(addrPorts(hostports...)...)
}

// configuredSelf is the NATS and memberlist addresses the configuration
// fixes (a port of 0 is chosen at start: addSelfListeners adds it).
func (r *Replica) configuredSelf() []netip.AddrPort {
	var hp []string
	if r.cfg.NATSURL == "" {
		hp = append(hp, r.cfg.NATSListen)
	}
	if r.cfg.ClusterBind != "" {
		hp = append(hp, r.cfg.ClusterBind)
	}
	return addrPorts(hp...)
}

// addrPorts parses host:port pairs with a literal (or empty: unspecified)
// host and a port above 0; others are skipped.
func addrPorts(hostports ...string) []netip.AddrPort {
	var out []netip.AddrPort
	for _, hp := range hostports {
		h, p, err := net.SplitHostPort(hp)
		if err != nil {
			continue
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil || port == 0 {
			continue
		}
		a := netip.IPv4Unspecified()
		if h != "" {
			if a, err = netip.ParseAddr(h); err != nil {
				continue
			}
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(port)))
	}
	return out
}
