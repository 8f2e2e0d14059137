package scheduling

import (
	"errors"
	"math"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	want := Config{
		OverlapScoreCredit: 1, PrefillLoadScale: 1, HostCacheHitWeight: 0.75, DiskCacheHitWeight: 0.25,
		TrackPrefillTokens: true, AssumeKVReuse: true, RouterQueueEnabled: true, RouterQueueThreshold: 16,
		RouterQueuePolicy: PolicyFCFS, MaxQueueLength: 1024,
		RouterCost: CostDynamo, TTFT: TTFTConfig{UncachedWeight: 2, KVHeadroom: 0.9, PrefillTokensPerSec: 10000},
		MaxLocalPrefillLength: 1000,
	}
	if c != want {
		t.Fatalf("DefaultConfig() = %+v, want %+v", c, want)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		ok     bool
	}{
		{"credit 0", func(c *Config) { c.OverlapScoreCredit = 0 }, true},
		{"ttft cost", func(c *Config) { c.RouterCost = CostTTFT }, true},
		{"empty cost is dynamo", func(c *Config) { c.RouterCost = "" }, true},
		{"unknown cost", func(c *Config) { c.RouterCost = "fastest" }, false},
		{"ttft negative uncached weight", func(c *Config) { c.RouterCost = CostTTFT; c.TTFT.UncachedWeight = -1 }, false},
		{"ttft headroom 0", func(c *Config) { c.RouterCost = CostTTFT; c.TTFT.KVHeadroom = 0 }, false},
		{"ttft headroom above 1", func(c *Config) { c.RouterCost = CostTTFT; c.TTFT.KVHeadroom = 1.1 }, false},
		{"ttft prior rate 0", func(c *Config) { c.RouterCost = CostTTFT; c.TTFT.PrefillTokensPerSec = 0 }, false},
		{"ttft knobs unchecked under dynamo", func(c *Config) { c.TTFT.PrefillTokensPerSec = 0 }, true},
		{"credit above 1", func(c *Config) { c.OverlapScoreCredit = 1.5 }, false},
		{"credit negative", func(c *Config) { c.OverlapScoreCredit = -0.1 }, false},
		{"credit NaN", func(c *Config) { c.OverlapScoreCredit = math.NaN() }, false},
		{"negative temperature", func(c *Config) { c.RouterTemperature = -1 }, false},
		{"infinite temperature", func(c *Config) { c.RouterTemperature = math.Inf(1) }, false},
		{"large scale", func(c *Config) { c.PrefillLoadScale = 10 }, true},
		{"negative scale", func(c *Config) { c.PrefillLoadScale = -1 }, false},
		{"negative deprecated weight", func(c *Config) { c.OverlapScoreWeight = ptr(-1.0) }, false},
		{"host weight above 1", func(c *Config) { c.HostCacheHitWeight = 1.1 }, false},
		{"disk weight negative", func(c *Config) { c.DiskCacheHitWeight = -0.1 }, false},
		{"negative decay", func(c *Config) { c.OverlapScoreCreditDecay = -1 }, false},
		{"negative request weight", func(c *Config) { c.DecodeActiveRequestWeight = -1 }, false},
		{"queue threshold 0", func(c *Config) { c.RouterQueueThreshold = 0 }, true},
		{"negative queue threshold", func(c *Config) { c.RouterQueueThreshold = -1 }, false},
		{"zero queue length", func(c *Config) { c.MaxQueueLength = 0 }, false},
		{"huge queue length", func(c *Config) { c.MaxQueueLength = MaxQueueLengthCeiling + 1 }, false},
		{"wspt", func(c *Config) { c.RouterQueuePolicy = PolicyWSPT }, true},
		{"unknown policy", func(c *Config) { c.RouterQueuePolicy = "sjf" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.ok && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !tt.ok && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestMigrationAndOverride(t *testing.T) {
	tests := []struct {
		name       string
		base       func(*Config)
		override   *Override
		wantCredit float64
		wantScale  float64
		wantTemp   float64
		wantTrack  bool
		wantReuse  bool
	}{
		{"defaults", nil, nil, 1, 1, 0, true, true},
		{"deprecated weight becomes the scale", func(c *Config) { c.OverlapScoreWeight = ptr(2.0) }, nil, 1, 2, 0, true, true},
		{"deprecated weight 0 also zeroes the credit", func(c *Config) { c.OverlapScoreWeight = ptr(0.0) }, nil, 0, 0, 0, true, true},
		{"deprecated weight beats the new keys", func(c *Config) {
			c.OverlapScoreWeight = ptr(0.5)
			c.PrefillLoadScale = 3
			c.OverlapScoreCredit = 0.7
		}, nil, 0.7, 0.5, 0, true, true},
		{"override new keys", nil, &Override{OverlapScoreCredit: ptr(0.25), PrefillLoadScale: ptr(4.0)}, 0.25, 4, 0, true, true},
		{"override deprecated weight wins over its own new keys", nil,
			&Override{OverlapScoreWeight: ptr(0.0), OverlapScoreCredit: ptr(0.9), PrefillLoadScale: ptr(5.0)}, 0, 0, 0, true, true},
		{"override weight over a migrated base", func(c *Config) { c.OverlapScoreWeight = ptr(0.0) },
			&Override{OverlapScoreWeight: ptr(2.0)}, 0, 2, 0, true, true},
		{"override flags and temperature", nil,
			&Override{RouterTemperature: ptr(0.5), TrackPrefillTokens: ptr(false), AssumeKVReuse: ptr(false)}, 1, 1, 0.5, false, false},
		{"empty override keeps base", func(c *Config) { c.RouterTemperature = 0.3 }, &Override{}, 1, 1, 0.3, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := DefaultConfig()
			if tt.base != nil {
				tt.base(&base)
			}
			got := base.WithOverride(tt.override)
			if got.OverlapScoreWeight != nil {
				t.Fatal("deprecated weight left set after WithOverride")
			}
			if got.OverlapScoreCredit != tt.wantCredit || got.PrefillLoadScale != tt.wantScale ||
				got.RouterTemperature != tt.wantTemp || got.TrackPrefillTokens != tt.wantTrack || got.AssumeKVReuse != tt.wantReuse {
				t.Fatalf("got credit=%v scale=%v temp=%v track=%v reuse=%v", got.OverlapScoreCredit,
					got.PrefillLoadScale, got.RouterTemperature, got.TrackPrefillTokens, got.AssumeKVReuse)
			}
		})
	}
}

func TestOverrideValidate(t *testing.T) {
	if err := (&Override{OverlapScoreCredit: ptr(1.5)}).Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("credit 1.5 err = %v", err)
	}
	if err := (&Override{RouterTemperature: ptr(-1.0)}).Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative temperature err = %v", err)
	}
	if err := (&Override{OverlapScoreWeight: ptr(3.0)}).Validate(); err != nil {
		t.Fatalf("valid override: %v", err)
	}
	var nilOverride *Override
	if err := nilOverride.Validate(); err != nil {
		t.Fatalf("nil override: %v", err)
	}
}
