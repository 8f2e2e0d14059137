package config

import (
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/trust"
)

// The index-trust flags reach the actors with their documented
// defaults, and bad thresholds are refused by Validate.
func TestIndexTrustFlags(t *testing.T) {
	cfg := Default()
	got := cfg.Actors().Trust
	if got != trust.DefaultConfig() {
		t.Fatalf("defaults %+v, want %+v", got, trust.DefaultConfig())
	}
	cfg.IndexTrustStaleAfter = 3 * time.Second
	cfg.IndexTrustParityWindow = 8
	if a := cfg.Actors().Trust; a.StaleAfter != 3*time.Second || a.ParityWindow != 8 {
		t.Fatalf("mapping: %+v", a)
	}
	cfg.IndexTrustParityClean = 0.9
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "parity thresholds") {
		t.Fatalf("validate: %v", err)
	}
	cfg.IndexTrust = false
	if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), "parity thresholds") {
		t.Fatalf("thresholds checked with trust off: %v", err)
	}
}
