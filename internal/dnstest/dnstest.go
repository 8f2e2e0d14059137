// Package dnstest is a small authoritative DNS server on loopback whose
// records a test (or kvbench's DNS-discovered fleet) changes while it runs (github.com/miekg/dns): A, AAAA
// and SRV records, NXDOMAIN for unknown names, and Stop to make it
// unreachable. Go's resolver talks to it over real UDP.
package dnstest

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Server answers from its records until stopped.
type Server struct {
	mu   sync.Mutex
	ips  map[string][]net.IP
	srvs map[string][]*dns.SRV
	srv  *dns.Server
	addr string
	// Queries counts the questions answered.
	queries int
}

// Start serves on a random loopback UDP port; the test's cleanup stops it.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// New serves on a UDP address (outside tests: kvbench's DNS-discovered
// fleet); Stop ends it.
func New(addr string) (*Server, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	s := &Server{ips: map[string][]net.IP{}, srvs: map[string][]*dns.SRV{}, addr: pc.LocalAddr().String()}
	s.srv = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(s.serve)}
	started := make(chan struct{})
	s.srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = s.srv.ActivateAndServe() }()
	<-started
	return s, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Stop shuts the server down: lookups then fail as unreachable.
func (s *Server) Stop() { _ = s.srv.Shutdown() }

// SetIPs replaces a name's A and AAAA records (none: the name is gone).
func (s *Server) SetIPs(name string, ips ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name = dns.Fqdn(name)
	if len(ips) == 0 {
		delete(s.ips, name)
		return
	}
	var out []net.IP
	for _, ip := range ips {
		out = append(out, net.ParseIP(ip))
	}
	s.ips[name] = out
}

// SetSRV replaces a name's SRV records, "target:port" each.
func (s *Server) SetSRV(name string, targets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name = dns.Fqdn(name)
	if len(targets) == 0 {
		delete(s.srvs, name)
		return
	}
	var out []*dns.SRV
	for _, t := range targets {
		host, port, _ := net.SplitHostPort(t)
		p, _ := net.LookupPort("tcp", port)
		out = append(out, &dns.SRV{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 5},
			Priority: 0, Weight: 10, Port: uint16(p), Target: dns.Fqdn(host)})
	}
	s.srvs[name] = out
}

// Queries is how many questions the server answered.
func (s *Server) Queries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries
}

func (s *Server) serve(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	s.mu.Lock()
	s.queries++
	for _, q := range r.Question {
		name := strings.ToLower(q.Name)
		ips, hasIPs := s.ips[name]
		srvs, hasSRV := s.srvs[name]
		if !hasIPs && !hasSRV {
			m.Rcode = dns.RcodeNameError
			continue
		}
		switch q.Qtype {
		case dns.TypeA, dns.TypeAAAA:
			for _, ip := range ips {
				hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 5}
				if v4 := ip.To4(); v4 != nil && q.Qtype == dns.TypeA {
					hdr.Rrtype = dns.TypeA
					m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: v4})
				} else if v4 == nil && q.Qtype == dns.TypeAAAA {
					hdr.Rrtype = dns.TypeAAAA
					m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: ip})
				}
			}
		case dns.TypeSRV:
			for _, rr := range srvs {
				m.Answer = append(m.Answer, rr)
			}
		}
	}
	s.mu.Unlock()
	_ = w.WriteMsg(m)
}
