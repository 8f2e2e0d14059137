package cluster

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"default with a key", func(*Config) {}, true},
		{"keyless on 0.0.0.0", func(c *Config) { c.Keys = nil }, false},
		{"keyless on 0.0.0.0, insecure", func(c *Config) { c.Keys, c.Insecure = nil, true }, true},
		{"keyless on loopback", func(c *Config) { c.Keys, c.BindAddr = nil, "127.0.0.1" }, true},
		{"keyless on ::1", func(c *Config) { c.Keys, c.BindAddr = nil, "::1" }, true},
		{"key file", func(c *Config) { c.Keys, c.KeyFile = nil, "/run/secrets/key" }, true},
		{"keys and key file", func(c *Config) { c.KeyFile = "/run/secrets/key" }, false},
		{"key of 20 bytes", func(c *Config) { c.Keys = [][]byte{make([]byte, 20)} }, false},
		{"two keys", func(c *Config) { c.Keys = append(c.Keys, make([]byte, 16)) }, true},
		{"label too long", func(c *Config) { c.Label = strings.Repeat("l", 256) }, false},
		{"tls files partly", func(c *Config) { c.TLSCertFile = "c.pem" }, false},
		{"tls files", func(c *Config) { c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = "c.pem", "k.pem", "ca.pem" }, true},
		{"no inbound streams", func(c *Config) { c.MaxInboundStreams = 0 }, false},
		{"idle timeout below anti-entropy", func(c *Config) { c.StreamIdleTimeout = c.AntiEntropyInterval }, false},
		{"frame timeout zero", func(c *Config) { c.StreamFrameTimeout = 0 }, false},
		{"frame cap tiny", func(c *Config) { c.MaxFrameBytes = 1000 }, false},
		{"join names and ips", func(c *Config) { c.Join = []string{"10.0.0.1:7946", "kvrouter-gossip.ns.svc:7946"} }, true},
		{"empty id", func(c *Config) { c.ReplicaID = "" }, false},
		{"non-utf8 id", func(c *Config) { c.ReplicaID = "\xff" }, false},
		{"bind not ip", func(c *Config) { c.BindAddr = "localhost" }, false},
		{"port range", func(c *Config) { c.BindPort = 70000 }, false},
		{"batch zero", func(c *Config) { c.BatchMaxEvents = 0 }, false},
		{"batch interval as bare number", func(c *Config) { c.BatchInterval = 1000 }, false},
		{"queue zero", func(c *Config) { c.QueueSize = 0 }, false},
		{"probe timeout above interval", func(c *Config) { c.ProbeTimeout = 2 * c.ProbeInterval }, false},
		{"udp buffer tiny", func(c *Config) { c.UDPBufferSize = 100 }, false},
		{"join without port", func(c *Config) { c.Join = []string{"10.0.0.1"} }, false},
		{"join port zero", func(c *Config) { c.Join = []string{"host:0"} }, false},
		{"meta too large", func(c *Config) { c.Version = strings.Repeat("v", 600) }, false},
		{"anti-entropy zero", func(c *Config) { c.AntiEntropyInterval = 0 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Keys = [][]byte{make([]byte, 32)}
			tt.mutate(&c)
			err := c.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
	if err := LocalTestConfig().Validate(); err != nil {
		t.Fatalf("LocalTestConfig: %v", err)
	}
}

func TestBatchRules(t *testing.T) {
	for _, tt := range []struct {
		n  int
		ok bool
	}{{-1, false}, {0, false}, {1, true}, {DefaultBatchMaxEvents, true}, {MaxBatchEvents, true}, {MaxBatchEvents + 1, false}} {
		if err := CheckBatchMaxEvents(tt.n); (err == nil) != tt.ok {
			t.Errorf("CheckBatchMaxEvents(%d) = %v, want ok=%v", tt.n, err, tt.ok)
		}
	}
	for _, tt := range []struct {
		d  time.Duration
		ok bool
	}{{-time.Millisecond, false}, {0, false}, {MinBatchInterval - 1, false}, {MinBatchInterval, true}, {DefaultBatchInterval, true}} {
		if err := CheckBatchInterval(tt.d); (err == nil) != tt.ok {
			t.Errorf("CheckBatchInterval(%v) = %v, want ok=%v", tt.d, err, tt.ok)
		}
	}
	c := DefaultConfig()
	if c.BatchMaxEvents != DefaultBatchMaxEvents || c.BatchInterval != DefaultBatchInterval {
		t.Fatalf("DefaultConfig batch %d / %v", c.BatchMaxEvents, c.BatchInterval)
	}
	c.BatchInterval = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "BatchInterval") {
		t.Fatalf("Validate() = %v, want one naming BatchInterval", err)
	}
}

func TestDefaultReplicaIDsDiffer(t *testing.T) {
	a, b := DefaultConfig().ReplicaID, DefaultConfig().ReplicaID
	if a == b || a == "" {
		t.Fatalf("two boots got ids %q and %q", a, b)
	}
}

func TestFailureDetectionBound(t *testing.T) {
	c := LocalTestConfig() // 100 ms probes, 80 ms timeout, mult 3, max mult 3
	if got, want := c.FailureDetectionBound(3), 200*time.Millisecond+80*time.Millisecond+900*time.Millisecond; got != want {
		t.Fatalf("bound = %v, want %v", got, want)
	}
	if c.FailureDetectionBound(100) <= c.FailureDetectionBound(3) {
		t.Fatal("bound does not grow with the cluster")
	}
}

func TestMetaLimit(t *testing.T) {
	want := nodeMeta{ReplicaID: "r", HTTPAddr: "h:1", Version: "v", StreamPort: 1, StreamVersion: 1, StreamKey: "AAAA"}
	b, err := encodeMeta(want)
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeMeta(b)
	if err != nil || m != want {
		t.Fatalf("round trip = %+v, %v", m, err)
	}
	if _, err := encodeMeta(nodeMeta{ReplicaID: strings.Repeat("x", 520)}); err == nil {
		t.Fatal("oversized meta accepted")
	}
	if _, err := decodeMeta([]byte("{")); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad meta error = %v", err)
	}
}

func TestResolveJoin(t *testing.T) {
	lookup := func(_ context.Context, host string) ([]string, error) {
		switch host {
		case "headless.svc":
			return []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, nil
		case "dup.svc":
			return []string{"10.0.0.1"}, nil
		}
		return nil, errors.New("no such host")
	}
	tests := []struct {
		name    string
		entries []string
		want    []string
		wantErr bool
	}{
		{"ip", []string{"10.1.1.1:7946"}, []string{"10.1.1.1:7946"}, false},
		{"headless service", []string{"headless.svc:7000"}, []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}, false},
		{"deduplicated", []string{"headless.svc:7000", "dup.svc:7000"}, []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}, false},
		{"partly unresolvable", []string{"gone.svc:1", "10.1.1.1:2"}, []string{"10.1.1.1:2"}, true},
		{"nothing resolves", []string{"gone.svc:1"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveJoin(context.Background(), lookup, tt.entries)
			if !slices.Equal(got, tt.want) || (err != nil) != tt.wantErr {
				t.Fatalf("resolveJoin = %v, %v; want %v, err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	if _, err := resolveJoin(context.Background(), lookup, []string{"gone.svc:1"}); !errors.Is(err, ErrNoPeers) {
		t.Fatalf("error %v does not wrap ErrNoPeers", err)
	}
}

func TestParseMemberlistLine(t *testing.T) {
	tests := []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=1.2.3.4\n", slog.LevelDebug, "Stream connection from=1.2.3.4"},
		{"[WARN] memberlist: Refuting a suspect message", slog.LevelWarn, "Refuting a suspect message"},
		{"[ERR] memberlist: Failed to send ping", slog.LevelError, "Failed to send ping"},
		{"[ERR] memberlist: write: use of closed network connection", slog.LevelDebug, "write: use of closed network connection"},
		{"[INFO] memberlist: Suspect r1 has failed", slog.LevelInfo, "Suspect r1 has failed"},
		{"no prefix", slog.LevelInfo, "no prefix"},
	}
	for _, tt := range tests {
		level, msg := parseMemberlistLine([]byte(tt.line))
		if level != tt.level || msg != tt.msg {
			t.Errorf("parse(%q) = %v %q, want %v %q", tt.line, level, msg, tt.level, tt.msg)
		}
	}
}
