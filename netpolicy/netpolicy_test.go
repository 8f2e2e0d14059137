package netpolicy

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func fakeDNS(m map[string][]string) Resolver {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		ips, ok := m[host]
		if !ok {
			return nil, errors.New("no such host")
		}
		var out []netip.Addr
		for _, s := range ips {
			out = append(out, netip.MustParseAddr(s))
		}
		return out, nil
	}
}

func TestParse(t *testing.T) {
	for _, bad := range []string{"10.0.0.0/33", "nope/8", "a..b", "*.", "ex ample.com", "*.*.com", "http://x"} {
		if _, err := Parse([]string{bad}); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
	p, err := Parse([]string{" private ", "203.0.113.7", "2001:db8::/32", "Vllm-0.Vllm", "*.svc.cluster.local.", ""})
	if err != nil {
		t.Fatal(err)
	}
	if !p.ipAllowed(netip.MustParseAddr("203.0.113.7")) || p.ipAllowed(netip.MustParseAddr("203.0.113.8")) ||
		!p.ipAllowed(netip.MustParseAddr("2001:db8::1")) || !p.ipAllowed(netip.MustParseAddr("10.1.2.3")) {
		t.Fatalf("prefixes: %v", p.prefixes)
	}
	if !p.nameAllowed("vllm-0.vllm") || !p.nameAllowed("w.ns.svc.cluster.local") || p.nameAllowed("svc.cluster.local") || p.nameAllowed("evil.com") {
		t.Fatalf("names %v suffixes %v", p.names, p.suffixes)
	}
	if got := (&Policy{}).CheckWorkerURL(context.Background(), "http://10.0.0.1", nil); Reason(got) != ReasonNotAllowed {
		t.Fatalf("zero policy allows: %v", got)
	}
}

func TestCheckWorkerURL(t *testing.T) {
	self := []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:8080"), netip.MustParseAddrPort("127.0.0.1:9090"),
		netip.MustParseAddrPort("[::]:8443")}
	local := []netip.Addr{netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("fd00::7")}
	dns := fakeDNS(map[string][]string{
		"localhost": {"127.0.0.1", "::1"}, "worker-a": {"10.0.0.9"}, "public.example": {"93.184.216.34"},
		"metadata.google.internal": {"169.254.169.254"}, "mixed": {"10.0.0.9", "8.8.8.8"},
		"me": {"10.0.0.7"}, "w.svc.cluster.local": {"10.3.0.1"}, "rebind.svc.cluster.local": {"169.254.169.254"},
	})
	def := MustParse(DefaultAllow...).WithSelf(self, local)
	named := MustParse("private", "*.svc.cluster.local", "203.0.113.0/24").WithSelf(self, local)
	anyP := MustParse("any").WithSelf(self, local)
	for _, tt := range []struct {
		p      *Policy
		url    string
		reason string // "" = allowed
	}{
		{def, "", ""},
		{def, "http://10.0.0.5:8000", ""},
		{def, "https://10.0.0.5", ""},
		{def, "http://192.168.1.2:8000/base", ""},
		{def, "http://[fd00::5]:8000", ""},
		{def, "http://100.64.1.1:8000", ""},
		{def, "http://127.0.0.1:9001", ""},
		{def, "http://worker-a:8000", ""},
		{def, "http://localhost:9001", ""},
		{def, "file:///etc/passwd", ReasonInvalid},
		{def, "gopher://10.0.0.5:70", ReasonInvalid},
		{def, "http://user:pw@10.0.0.5:8000", ReasonInvalid},
		{def, "http://10.0.0.5:8000/?x=1", ReasonInvalid},
		{def, "http://10.0.0.5:8000#f", ReasonInvalid},
		{def, "http://10.0.0.5:0", ReasonInvalid},
		{def, "http://10.0.0.5:99999", ReasonInvalid},
		{def, "http:10.0.0.5", ReasonInvalid},
		{def, "http://", ReasonInvalid},
		{def, "http://[fe80::1%25eth0]:80", ReasonInvalid},
		{def, "http://8.8.8.8:80", ReasonNotAllowed},
		{def, "http://public.example", ReasonNotAllowed},
		{def, "http://mixed:8000", ReasonNotAllowed},
		{def, "http://169.254.169.254/latest", ReasonNotAllowed},
		{def, "http://metadata.google.internal", ReasonNotAllowed},
		{def, "http://[fd00:ec2::254]", ReasonNotAllowed},
		{def, "http://100.100.100.200", ReasonNotAllowed},
		{def, "http://0.0.0.0:8000", ReasonNotAllowed},
		{def, "http://224.0.0.1:8000", ReasonNotAllowed},
		{def, "http://unknown-host:8000", ReasonUnresolvable},
		// Self: the 0.0.0.0:8080 bind is every local address.
		{def, "http://127.0.0.1:8080", ReasonSelf},
		{def, "http://127.0.0.2:8080", ReasonSelf},
		{def, "http://10.0.0.7:8080", ReasonSelf},
		{def, "http://[::ffff:10.0.0.7]:8080", ReasonSelf},
		{def, "http://localhost:8080", ReasonSelf},
		{def, "http://me:8080", ReasonSelf},
		{def, "http://10.0.0.8:8080", ""},
		{def, "http://127.0.0.1:9090", ReasonSelf},
		{def, "http://127.0.0.2:9090", ""},
		{def, "http://10.0.0.7:9090", ""},
		{def, "https://[::1]:8443", ReasonSelf},
		{def, "https://[fd00::7]:8443", ReasonSelf},
		// Names allowed by pattern need no resolution, but self and
		// never-allowed addresses still count.
		{named, "http://w.svc.cluster.local:8000", ""},
		{named, "http://nodns.svc.cluster.local:8000", ""},
		{named, "http://rebind.svc.cluster.local:8000", ReasonNotAllowed},
		{named, "http://203.0.113.9:8000", ""},
		{anyP, "http://8.8.8.8", ""},
		{anyP, "http://public.example", ""},
		{anyP, "http://169.254.169.254", ReasonNotAllowed},
		{anyP, "http://10.0.0.7:8080", ReasonSelf},
	} {
		err := tt.p.CheckWorkerURL(context.Background(), tt.url, dns)
		if Reason(err) != tt.reason || (err == nil) != (tt.reason == "") {
			t.Errorf("%s CheckWorkerURL(%q) = %v, want reason %q", tt.p, tt.url, err, tt.reason)
		}
	}
	// Without a resolver a name needs an allow-list name.
	if err := def.CheckWorkerURL(context.Background(), "http://worker-a:8000", nil); Reason(err) != ReasonNotAllowed {
		t.Errorf("no resolver: %v", err)
	}
	if err := named.CheckWorkerURL(context.Background(), "http://w.svc.cluster.local:8000", nil); err != nil {
		t.Errorf("no resolver, allowed name: %v", err)
	}
	err := def.CheckWorkerURL(context.Background(), "http://127.0.0.1:8080", dns)
	if !strings.Contains(err.Error(), "own listener 0.0.0.0:8080") {
		t.Errorf("self error does not name the listener: %v", err)
	}
}

func TestCheckZMQEndpoint(t *testing.T) {
	p := MustParse("private").WithSelf([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080")}, nil)
	for _, tt := range []struct {
		ep     string
		ranks  int
		reason string
	}{
		{"", 1, ""},
		{"tcp://10.0.0.5:5557", 1, ""},
		{"tcp://10.0.0.5:5557", 4, ""},
		{"tcp://127.0.0.1:8079", 1, ""},
		{"tcp://127.0.0.1:8079", 2, ReasonSelf}, // rank 1 is port 8080
		{"tcp://127.0.0.1:8080", 1, ReasonSelf},
		{"ipc:///tmp/engine", 1, ReasonInvalid},
		{"inproc://x", 1, ReasonInvalid},
		{"tcp://*:5557", 1, ReasonInvalid},
		{"tcp://10.0.0.5", 1, ReasonInvalid},
		{"tcp://10.0.0.5:0", 1, ReasonInvalid},
		{"tcp://8.8.8.8:5557", 1, ReasonNotAllowed},
		{"tcp://169.254.169.254:80", 1, ReasonNotAllowed},
	} {
		err := p.CheckZMQEndpoint(context.Background(), tt.ep, tt.ranks, nil)
		if Reason(err) != tt.reason || (err == nil) != (tt.reason == "") {
			t.Errorf("CheckZMQEndpoint(%q, %d) = %v, want reason %q", tt.ep, tt.ranks, err, tt.reason)
		}
	}
}

func TestCheckDial(t *testing.T) {
	p := MustParse("private", "*.svc.cluster.local").WithSelf([]netip.AddrPort{netip.MustParseAddrPort("[::]:8080")},
		[]netip.Addr{netip.MustParseAddr("10.0.0.7")})
	for _, tt := range []struct {
		host, ap string
		reason   string
	}{
		{"10.0.0.5", "10.0.0.5:8000", ""},
		{"w.svc.cluster.local", "203.0.113.5:8000", ""}, // allowed by name
		{"w.svc.cluster.local", "10.0.0.7:8080", ReasonSelf},
		{"w.svc.cluster.local", "169.254.169.254:80", ReasonNotAllowed},
		{"worker-a", "8.8.8.8:80", ReasonNotAllowed}, // resolved elsewhere since registration
		{"localhost", "127.0.0.1:8080", ReasonSelf},
		{"10.0.0.7", "10.0.0.7:8000", ""},
	} {
		err := p.CheckDial(tt.host, netip.MustParseAddrPort(tt.ap))
		if Reason(err) != tt.reason || (err == nil) != (tt.reason == "") {
			t.Errorf("CheckDial(%s, %s) = %v, want reason %q", tt.host, tt.ap, err, tt.reason)
		}
	}
}

func TestCache(t *testing.T) {
	calls := 0
	now := time.Unix(0, 0)
	r := Cache(func(_ context.Context, host string) ([]netip.Addr, error) {
		calls++
		if host == "bad" {
			return nil, errors.New("nxdomain")
		}
		return []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil
	}, time.Minute, 2, func() time.Time { return now })
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if a, err := r(ctx, "good"); err != nil || len(a) != 1 {
			t.Fatal(a, err)
		}
		if _, err := r(ctx, "bad"); err == nil {
			t.Fatal("bad resolved")
		}
	}
	if calls != 2 {
		t.Fatalf("%d lookups, want 2 (answers and failures cached)", calls)
	}
	now = now.Add(2 * time.Minute)
	_, _ = r(ctx, "good")
	if calls != 3 {
		t.Fatalf("%d lookups after the ttl, want 3", calls)
	}
	// A caller that gave up does not cache a failure.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = r(cctx, "other")
	_, _ = r(ctx, "other")
	if calls != 5 {
		t.Fatalf("%d lookups, want 5 (cancelled lookup not cached)", calls)
	}
}

// Listeners added after WithSelf (the embedded NATS, memberlist) are
// refused by every copy of the policy; a policy without WithSelf ignores
// AddSelf.
func TestAddSelf(t *testing.T) {
	p := MustParse("loopback").WithSelf([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:8080")}, nil)
	q := p // the replica hands the same policy to the API and the heartbeat check
	ctx := context.Background()
	if err := q.CheckWorkerURL(ctx, "http://127.0.0.1:4222", nil); err != nil {
		t.Fatalf("before AddSelf: %v", err)
	}
	p.AddSelf(netip.MustParseAddrPort("0.0.0.0:4222"))
	for _, u := range []string{"http://127.0.0.1:4222", "http://127.0.0.1:8080"} {
		if err := q.CheckWorkerURL(ctx, u, nil); Reason(err) != ReasonSelf {
			t.Errorf("%s: %v, want refused as the router's own", u, err)
		}
	}
	plain := MustParse("loopback")
	plain.AddSelf(netip.MustParseAddrPort("127.0.0.1:4222"))
	if err := plain.CheckWorkerURL(ctx, "http://127.0.0.1:4222", nil); err != nil {
		t.Fatalf("a policy without WithSelf: %v", err)
	}
}
