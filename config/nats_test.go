package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/natsbus"
)

func TestJetStreamBounds(t *testing.T) {
	none := func(string) string { return "" }
	cfg, err := Load(nil, none)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KVEventsMaxMsgs != natsbus.DefaultMaxMsgs || cfg.KVEventsMaxBytes != natsbus.DefaultMaxBytes ||
		cfg.KVEventsMaxAge != natsbus.DefaultMaxAge || cfg.SnapshotMaxBytes != natsbus.DefaultSnapshotMaxBytes {
		t.Fatalf("bounds %d msgs, %d bytes, %v, snapshots %d bytes", cfg.KVEventsMaxMsgs, cfg.KVEventsMaxBytes, cfg.KVEventsMaxAge, cfg.SnapshotMaxBytes)
	}
	if uint64(cfg.KVEventsMaxMsgs) <= cfg.RouterSnapshotThreshold {
		t.Fatalf("default max msgs %d not above the snapshot threshold %d", cfg.KVEventsMaxMsgs, cfg.RouterSnapshotThreshold)
	}
	cfg, err = Load([]string{"--kv-events-max-msgs", "-1", "--kv-events-max-bytes", "1048576", "--snapshot-max-bytes", "-1"}, none)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KVEventsMaxMsgs != -1 || cfg.KVEventsMaxBytes != 1<<20 || cfg.SnapshotMaxBytes != -1 {
		t.Fatalf("flags not applied: %d, %d, %d", cfg.KVEventsMaxMsgs, cfg.KVEventsMaxBytes, cfg.SnapshotMaxBytes)
	}
	// A message bound at or below the snapshot threshold would discard
	// events before any snapshot keeps them.
	_, err = Load([]string{"--kv-events-max-msgs", "1000", "--router-snapshot-threshold", "1000"}, none)
	if err == nil || !strings.Contains(err.Error(), "kv-events-max-msgs") {
		t.Fatalf("max msgs at the threshold: %v", err)
	}
	if _, err := Load([]string{"--kv-events-max-msgs", "1000", "--router-snapshot-threshold", "0"}, none); err != nil {
		t.Fatalf("snapshots disabled: %v", err)
	}
	if _, err := Load([]string{"--data-dir", ""}, none); err == nil {
		t.Fatal("embedded JetStream without a data dir must be refused")
	}
	if _, err := Load([]string{"--data-dir", "", "--jetstream=false"}, none); err != nil {
		t.Fatalf("no JetStream, no data dir: %v", err)
	}
}

func TestNATSAuthFlags(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	none := env(nil)
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("from-the-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The password comes from a file or the environment, never a flag.
	if _, err := Load([]string{"--nats-password", "x"}, none); err == nil {
		t.Fatal("--nats-password must not exist: a flag's value shows in ps")
	}
	cfg, err := Load([]string{"--nats-user", "router"}, env(map[string]string{"KVROUTER_NATS_PASSWORD": "from-the-env"}))
	if err != nil {
		t.Fatal(err)
	}
	if a, err := cfg.NATSAuth(); err != nil || a.User != "router" || a.Password != "from-the-env" {
		t.Fatalf("env password: %+v, %v", a, err)
	}
	cfg, err = Load([]string{"--nats-user", "router", "--nats-password-file", pw}, none)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := cfg.NATSAuth(); err != nil || a.Password != "from-the-file" {
		t.Fatalf("file password: %+v, %v", a, err)
	}
	cfg.NATSPasswordFile = filepath.Join(t.TempDir(), "missing")
	if _, err := cfg.NATSAuth(); err == nil {
		t.Fatal("a missing password file must be an error")
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string // "" = valid
	}{
		{[]string{"--nats-user", "router"}, nil, "password"},
		{[]string{"--nats-password-file", pw}, nil, "without a user"},
		{[]string{"--nats-user", "r", "--nats-password-file", pw}, map[string]string{"KVROUTER_NATS_PASSWORD": "p"}, "once"},
		{[]string{"--nats-user", "r", "--nats-password-file", pw, "--nats-nkey", "seed.nk"}, nil, "not several"},
		{[]string{"--nats-tls-cert", "c.pem"}, nil, "key go together"},
		{[]string{"--nats-listen", "0.0.0.0:4222"}, nil, "--nats-insecure"},
		{[]string{"--nats-listen", ":4222"}, nil, "--nats-insecure"},
		{[]string{"--nats-listen", "0.0.0.0:4222", "--nats-insecure"}, nil, ""},
		{[]string{"--nats-listen", "0.0.0.0:4222", "--nats-user", "r", "--nats-password-file", pw}, nil, ""},
		{[]string{"--nats-listen", "0.0.0.0:4222", "--nats-nkey", "seed.nk"}, nil, ""},
		{[]string{"--nats-listen", "0.0.0.0:4222", "--nats-server-config", "nats.conf"}, nil, ""},
		{[]string{"--nats-listen", "0.0.0.0:4222", "--nats-url", "nats://nats:4222"}, nil, ""}, // not embedded
		{[]string{"--nats-creds", "r.creds"}, nil, "operator"},
		{[]string{"--nats-creds", "r.creds", "--nats-url", "tls://nats:4222", "--nats-tls-ca", "ca.pem"}, nil, ""},
	} {
		_, err := Load(c.args, env(c.env))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want an error about %q", c.args, err, c.want)
		}
	}
}
