package config

import (
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
