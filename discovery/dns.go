package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// dnsSource resolves a name every interval: A/AAAA records (engines on a
// fixed port) or SRV records (targets and ports). A name that does not
// exist is an empty fleet; a server that does not answer is an error and
// keeps the last view.
type dnsSource struct {
	uri      string
	name     string
	port     int
	srv      bool
	interval time.Duration
	resolver *net.Resolver
	server   string // the DNS server asked instead of the system's ("" = the system's)
	defaults Defaults
	log      *slog.Logger
}

// DefaultEnginePort is vLLM's and the mock worker's HTTP port.
const DefaultEnginePort = 8000

func newDNSSource(uri string, u *url.URL, d Defaults, interval time.Duration, log *slog.Logger) (*dnsSource, error) {
	s := &dnsSource{uri: uri, srv: u.Scheme == "dns+srv", interval: interval, defaults: d, port: DefaultEnginePort,
		log: log, resolver: &net.Resolver{PreferGo: true}}
	s.name = u.Hostname()
	if s.name == "" {
		return nil, fmt.Errorf("--discover %q: no name to resolve", uri)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("--discover %q: bad port %q", uri, p)
		}
		if s.srv {
			return nil, fmt.Errorf("--discover %q: SRV records carry the ports; drop :%s", uri, p)
		}
		s.port = n
	}
	if server := u.Query().Get("server"); server != "" {
		if _, _, err := net.SplitHostPort(server); err != nil {
			return nil, fmt.Errorf("--discover %q: server %q: want host:port", uri, server)
		}
		s.server = server
		dialer := &net.Dialer{Timeout: 2 * time.Second}
		s.resolver.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, server)
		}
	}
	if interval <= 0 {
		return nil, fmt.Errorf("--discover %q: the discovery interval must be > 0", uri)
	}
	return s, nil
}

func (s *dnsSource) Name() string { return s.uri }

func (s *dnsSource) Run(ctx context.Context, emit func(Update)) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		recs, err := s.look(ctx)
		if ctx.Err() != nil {
			return
		}
		emit(Update{Source: s.uri, Records: recs, Err: err})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// look resolves the name once, within one interval (at most 5 s).
func (s *dnsSource) look(ctx context.Context) ([]Record, error) {
	ctx, cancel := context.WithTimeout(ctx, min(s.interval, 5*time.Second))
	defer cancel()
	type target struct {
		host string
		port int
	}
	targets := []target{{s.name, s.port}}
	if s.srv {
		_, srvs, err := s.resolver.LookupSRV(ctx, "", "", s.name)
		if notFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, s.dnsErr(err)
		}
		targets = targets[:0]
		for _, r := range srvs {
			targets = append(targets, target{r.Target, int(r.Port)})
		}
	}
	var out []Record
	for _, t := range targets {
		addrs, err := s.resolver.LookupIPAddr(ctx, t.host)
		if notFound(err) {
			continue
		}
		if err != nil {
			return nil, s.dnsErr(err)
		}
		for _, a := range addrs {
			ip := a.IP.String()
			key := "dns/" + net.JoinHostPort(ip, strconv.Itoa(t.port))
			out = append(out, s.defaults.record(key, net.JoinHostPort(ip, strconv.Itoa(t.port)), ip, t.port))
		}
	}
	slices.SortFunc(out, func(a, b Record) int {
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return out, nil
}

func notFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

func (s *dnsSource) dnsErr(err error) error {
	var de *net.DNSError
	reason := "dns_error"
	if errors.As(err, &de) && (de.IsTimeout || de.IsTemporary) || errors.Is(err, context.DeadlineExceeded) {
		reason = "dns_unreachable"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		reason = "dns_unreachable"
	}
	if s.server != "" {
		// Go's resolver names the system's server even when it dialed ours.
		return &ReasonError{Reason: reason, Err: fmt.Errorf("DNS lookup of %s at %s: %w", s.name, s.server, err)}
	}
	return &ReasonError{Reason: reason, Err: fmt.Errorf("DNS lookup: %w", err)}
}
