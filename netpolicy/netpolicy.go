// Package netpolicy decides which network addresses the router may be made
// to connect to by what it is told: worker URLs (POST /workers,
// heartbeats, --static-workers) and ZMQ KV-event endpoints announced in
// heartbeats. It is pure: no goroutines, no clock of its own, no I/O;
// name resolution is passed in (Resolver) and dialing is checked through a
// hook the caller installs (Policy.CheckDial).
//
// The rules, in order:
//
//   - a worker URL is http:// or https://, with a host, no userinfo, no
//     query or fragment; a ZMQ endpoint is tcp://host:port;
//   - never an address no worker can live at: link-local (169.254.0.0/16,
//     fe80::/10, which includes the clouds' metadata service),
//     the metadata addresses outside it (fd00:ec2::254, 100.100.100.200),
//     multicast, unspecified;
//   - the host matches the allow list (--worker-url-allow): an IP must be
//     in one of its CIDRs; a name must match one of its names or *.suffix
//     patterns, or else resolve only to allowed IPs;
//   - never one of the router's own listeners (host:port compared with
//     every listener, a 0.0.0.0 or :: bind meaning every local address).
package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Reasons a check fails, for metrics labels (Reason).
const (
	ReasonInvalid      = "invalid"      // not a usable URL or endpoint
	ReasonNotAllowed   = "not_allowed"  // outside --worker-url-allow, or a never-allowed address
	ReasonSelf         = "self"         // one of the router's own listeners
	ReasonUnresolvable = "unresolvable" // a name that did not resolve
)

// Error is a refused address.
type Error struct {
	Reason string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Reason is err's reason ("" if err is not an *Error).
func Reason(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func refuse(reason, format string, args ...any) error {
	return &Error{Reason: reason, Msg: fmt.Sprintf(format, args...)}
}

// Keywords of the allow list.
const (
	// Private is where a fleet's workers live: RFC 1918, RFC 6598 shared
	// space (some pod networks use it), IPv6 unique-local and loopback.
	Private = "private"
	// Loopback is 127.0.0.0/8 and ::1.
	Loopback = "loopback"
	// Any allows every unicast address and every name (the other rules
	// still apply).
	Any = "any"
)

// DefaultAllow is --worker-url-allow's default.
var DefaultAllow = []string{Private}

var (
	loopbackPrefixes = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	privatePrefixes  = append([]netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"),
		netip.MustParsePrefix("fc00::/7"),
	}, loopbackPrefixes...)
	anyPrefixes = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	// Never a worker, whatever the allow list says: cloud metadata
	// services (the link-local ranges hold 169.254.169.254 and
	// fe80::a9fe:a9fe) and the two outside them.
	deniedPrefixes = []netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("fe80::/10"),
		netip.MustParsePrefix("fd00:ec2::254/128"),
		netip.MustParsePrefix("100.100.100.200/32"),
	}
)

// Policy is a parsed allow list plus the router's own listeners. The zero
// value allows nothing; a Policy is immutable once built, but for the
// listeners AddSelf adds later (servers that start after the policy is
// handed out).
type Policy struct {
	spec     []string
	prefixes []netip.Prefix
	names    []string // exact names, lower case, no trailing dot
	suffixes []string // ".example.com" for "*.example.com"
	anyName  bool
	self     *selfList // nil: no own listeners
	local    []netip.Addr
}

// Parse reads --worker-url-allow entries: the keywords private, loopback
// and any, CIDRs (10.0.0.0/8), single IPs, host names (vllm-0.vllm) and
// *.suffix patterns (*.svc.cluster.local). An empty list allows nothing.
func Parse(entries []string) (*Policy, error) {
	p := &Policy{spec: slices.Clone(entries)}
	for _, raw := range entries {
		e := strings.ToLower(strings.TrimSpace(raw))
		switch {
		case e == "":
			continue
		case e == Private:
			p.prefixes = append(p.prefixes, privatePrefixes...)
		case e == Loopback:
			p.prefixes = append(p.prefixes, loopbackPrefixes...)
		case e == Any || e == "*":
			p.prefixes = append(p.prefixes, anyPrefixes...)
			p.anyName = true
		case strings.Contains(e, "/"):
			pf, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("worker-url-allow entry %q: not a CIDR: %w", raw, err)
			}
			p.prefixes = append(p.prefixes, pf.Masked())
		default:
			if a, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
				a = a.Unmap()
				p.prefixes = append(p.prefixes, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			suffix, wild := strings.CutPrefix(e, "*.")
			if !validName(suffix) {
				return nil, fmt.Errorf("worker-url-allow entry %q: want private, loopback, any, a CIDR, an IP, a host name or *.domain", raw)
			}
			if wild {
				p.suffixes = append(p.suffixes, "."+strings.TrimSuffix(suffix, "."))
			} else {
				p.names = append(p.names, strings.TrimSuffix(suffix, "."))
			}
		}
	}
	return p, nil
}

// MustParse is Parse for lists known to be valid.
func MustParse(entries ...string) *Policy {
	p, err := Parse(entries)
	if err != nil {
		panic(err)
	}
	return p
}

func validName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// WithSelf returns a copy of p that also refuses the router's own
// listeners. local is this host's addresses: a listener on 0.0.0.0 or ::
// is reached through any of them (and through loopback and the
// unspecified address, which are always counted).
func (p *Policy) WithSelf(listeners []netip.AddrPort, local []netip.Addr) *Policy {
	q := *p
	q.self = &selfList{}
	q.self.add(listeners)
	q.local = nil
	for _, a := range local {
		q.local = append(q.local, a.Unmap())
	}
	return &q
}

// AddSelf adds listeners opened after WithSelf (the embedded NATS
// server's client port, memberlist's gossip port) to the router's own,
// which worker URLs and ZMQ endpoints may not name. A policy not built by
// WithSelf ignores it. Safe for concurrent use with the checks.
func (p *Policy) AddSelf(listeners ...netip.AddrPort) {
	if p.self != nil {
		p.self.add(listeners)
	}
}

// selfList is the router's own listeners, shared by a policy's copies.
type selfList struct {
	mu    sync.Mutex // serialises add
	addrs atomic.Pointer[[]netip.AddrPort]
}

func (s *selfList) add(listeners []netip.AddrPort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var cur []netip.AddrPort
	if p := s.addrs.Load(); p != nil {
		cur = *p
	}
	next := slices.Clone(cur)
	for _, l := range listeners {
		next = append(next, netip.AddrPortFrom(l.Addr().Unmap(), l.Port()))
	}
	s.addrs.Store(&next)
}

func (s *selfList) load() []netip.AddrPort {
	if s == nil {
		return nil
	}
	if p := s.addrs.Load(); p != nil {
		return *p
	}
	return nil
}

// String is the allow list as given.
func (p *Policy) String() string { return strings.Join(p.spec, ",") }

// Resolver resolves a host name to its addresses.
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

// CheckWorkerURL checks a worker's base URL. An empty URL passes (a worker
// that is only routed to, never proxied to). resolve may be nil: a name
// that no allow-list name matches is then refused.
func (p *Policy) CheckWorkerURL(ctx context.Context, raw string, resolve Resolver) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return refuse(ReasonInvalid, "worker URL %q: %v", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return refuse(ReasonInvalid, "worker URL %q: scheme must be http or https", raw)
	case u.Opaque != "" || u.Host == "":
		return refuse(ReasonInvalid, "worker URL %q: no host", raw)
	case u.User != nil:
		return refuse(ReasonInvalid, "worker URL %q: userinfo (user:password@) is not allowed", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return refuse(ReasonInvalid, "worker URL %q: want a base URL without query or fragment", raw)
	}
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			return refuse(ReasonInvalid, "worker URL %q: bad port %q", raw, ps)
		}
		port = n
	}
	return p.checkHost(ctx, "worker URL "+strconv.Quote(raw), u.Hostname(), port, 1, resolve)
}

// CheckZMQEndpoint checks a ZMQ endpoint announced for ranks data-parallel
// ranks (rank i connects to port + i): tcp://host:port only, since an ipc
// or inproc endpoint names something inside the router's own host.
func (p *Policy) CheckZMQEndpoint(ctx context.Context, raw string, ranks int, resolve Resolver) error {
	if raw == "" {
		return nil
	}
	scheme, addr, ok := strings.Cut(raw, "://")
	if !ok || scheme != "tcp" {
		return refuse(ReasonInvalid, "ZMQ endpoint %q: want tcp://host:port", raw)
	}
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return refuse(ReasonInvalid, "ZMQ endpoint %q: %v", raw, err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return refuse(ReasonInvalid, "ZMQ endpoint %q: bad port %q", raw, ps)
	}
	if host == "" || host == "*" {
		return refuse(ReasonInvalid, "ZMQ endpoint %q: a wildcard host is a bind address, not one to connect to", raw)
	}
	return p.checkHost(ctx, "ZMQ endpoint "+strconv.Quote(raw), host, port, max(ranks, 1), resolve)
}

// checkHost checks host at ports port .. port+span-1.
func (p *Policy) checkHost(ctx context.Context, what, host string, port, span int, resolve Resolver) error {
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return refuse(ReasonInvalid, "%s: an IPv6 zone is not allowed", what)
		}
		return p.checkAddr(what, a, port, span, false)
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if !validName(name) {
		return refuse(ReasonInvalid, "%s: %q is not a host name", what, host)
	}
	byName := p.nameAllowed(name)
	if resolve == nil {
		if byName {
			return nil
		}
		return refuse(ReasonNotAllowed, "%s: host %s is not in --worker-url-allow (%s)", what, host, p)
	}
	addrs, err := resolve(ctx, name)
	if err != nil || len(addrs) == 0 {
		if byName {
			// Allowed by name: the dial-time check sees the address.
			return nil
		}
		return refuse(ReasonUnresolvable, "%s: cannot resolve %s to check it against --worker-url-allow: %v", what, host, err)
	}
	for _, a := range addrs {
		if err := p.checkAddr(what, a, port, span, byName); err != nil {
			return err
		}
	}
	return nil
}

func (p *Policy) nameAllowed(name string) bool {
	if p.anyName {
		return true
	}
	if slices.Contains(p.names, name) {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// checkAddr checks one IP at ports port .. port+span-1; byName: the host
// name is allowed, so only the never-allowed and self rules apply.
func (p *Policy) checkAddr(what string, a netip.Addr, port, span int, byName bool) error {
	a = a.Unmap()
	if denied(a) {
		return refuse(ReasonNotAllowed, "%s: %s is link-local, multicast, unspecified or a cloud metadata address: never a worker", what, a)
	}
	if !byName && !p.ipAllowed(a) {
		return refuse(ReasonNotAllowed, "%s: %s is not in --worker-url-allow (%s)", what, a, p)
	}
	for i := 0; i < span; i++ {
		if l, ok := p.selfListener(a, port+i); ok {
			return refuse(ReasonSelf, "%s: %s is this router's own listener %s", what,
				netip.AddrPortFrom(a, uint16(port+i)), l)
		}
	}
	return nil
}

func denied(a netip.Addr) bool {
	if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsInterfaceLocalMulticast() {
		return true
	}
	for _, pf := range deniedPrefixes {
		if pf.Contains(a) {
			return true
		}
	}
	return a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

func (p *Policy) ipAllowed(a netip.Addr) bool {
	for _, pf := range p.prefixes {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}

// selfListener reports the listener a connection to a:port would reach.
func (p *Policy) selfListener(a netip.Addr, port int) (netip.AddrPort, bool) {
	if port < 1 || port > 65535 {
		return netip.AddrPort{}, false
	}
	for _, l := range p.self.load() {
		if int(l.Port()) != port {
			continue
		}
		la := l.Addr()
		switch {
		case la == a:
			return l, true
		case a.IsUnspecified():
			// Dialing 0.0.0.0 or :: reaches the local host.
			return l, true
		case la.IsUnspecified() && (a.IsLoopback() || slices.Contains(p.local, a)):
			return l, true
		}
	}
	return netip.AddrPort{}, false
}

// CheckDial checks the address a connection is about to be made to (the
// resolved IP and port), for a dial of host (the name or IP the URL
// gave). Installed in the proxy's dialer, it is the check that cannot be
// raced by DNS: it sees the address actually dialed.
func (p *Policy) CheckDial(host string, ap netip.AddrPort) error {
	what := "dial " + host
	byName := false
	if _, err := netip.ParseAddr(host); err != nil {
		byName = p.nameAllowed(strings.TrimSuffix(strings.ToLower(host), "."))
	}
	return p.checkAddr(what, ap.Addr(), int(ap.Port()), 1, byName)
}
