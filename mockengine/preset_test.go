package mockengine

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestDeriveH100Llama3_8B(t *testing.T) {
	if got := Llama3_8B.KVBytesPerToken(); got != 128<<10 {
		t.Fatalf("Llama-3-8B KV bytes per token %v, want 32×8×128×2×2 = 131072", got)
	}
	c, err := Preset(PresetH100Llama3_8B)
	if err != nil {
		t.Fatal(err)
	}
	// (81559 MiB × 0.9 − 8.03e9×2 − 4e9) / (128 KiB × 16)
	wantBlocks := 27136 // (81559 MiB × 0.9 − 16.06 GB − 4 GB) / 2 MiB = 27136.2
	if c.TotalKVBlocks != wantBlocks || c.TotalKVBlocks < 25000 || c.TotalKVBlocks > 30000 {
		t.Errorf("cache %d blocks, want %d (25-30k: ~430k tokens)", c.TotalKVBlocks, wantBlocks)
	}
	if want := 0.53 * 989e12 / (2 * 8.03e9); math.Abs(c.PrefillTokensPerSec-want) > 1 {
		t.Errorf("prefill %v tok/s, want %v", c.PrefillTokensPerSec, want)
	}
	if c.StepBaseTime < 4700*time.Microsecond || c.StepBaseTime > 4900*time.Microsecond {
		t.Errorf("step base %v, want ~4.8 ms (16 GB of weights at 3.35 TB/s)", c.StepBaseTime)
	}
	if want := 3.35e12 / 131072; math.Abs(c.DecodeKVTokensPerSec-want) > 1 {
		t.Errorf("decode KV read %v tok/s, want %v", c.DecodeKVTokensPerSec, want)
	}
	if c.BlockSize != 16 || c.MaxNumBatchedTokens != 8192 || c.MaxNumSeqs != 256 || c.ModelName != "Llama-3-8B" {
		t.Errorf("serving knobs %+v", c)
	}
	if _, err := Preset("tpu-llama-9000"); !errors.Is(err, ErrUnknownPreset) {
		t.Errorf("unknown preset: %v", err)
	}
	if got := Presets(); len(got) == 0 || got[0] != PresetH100Llama3_8B {
		t.Errorf("presets %v", got)
	}
}

func TestDeriveRefusesAModelThatDoesNotFit(t *testing.T) {
	big := Llama3_8B
	big.Params = 70e9
	if _, err := Derive(big, H100SXM80GB, VLLMDefaults); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("70B on one H100: %v", err)
	}
}

// A decode step reads its decoding requests' KV: the same batch with
// longer contexts takes longer.
func TestDecodeStepPaysForContext(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DecodeKVTokensPerSec = 1e6 // 1 µs per context token
	if got, want := cfg.stepDuration(0, 2, 3000), cfg.StepBaseTime+2*cfg.DecodeTimePerSeq+3*time.Millisecond; got != want {
		t.Fatalf("step %v, want %v", got, want)
	}
	cfg.DecodeKVTokensPerSec = 0
	if got, want := cfg.stepDuration(0, 2, 3000), cfg.StepBaseTime+2*cfg.DecodeTimePerSeq; got != want {
		t.Fatalf("without the KV term: step %v, want %v", got, want)
	}
	cfg.DecodeKVTokensPerSec = -1
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("negative KV read rate: %v", err)
	}
}

func TestPresetArg(t *testing.T) {
	tests := []struct {
		args  []string
		want  string
		found bool
	}{
		{[]string{"--workers", "8", "--preset", "h100-llama3-8b", "--qps", "4"}, "h100-llama3-8b", true},
		{[]string{"-preset=x"}, "x", true},
		{[]string{"--preset=a", "--preset", "b"}, "b", true},
		{[]string{"--workers", "8"}, "", false},
		{[]string{"--", "--preset", "x"}, "", false},
		{[]string{"--preset"}, "", true},
		{[]string{"--presets", "x"}, "", false},
	}
	for _, tt := range tests {
		got, found := PresetArg(tt.args)
		if got != tt.want || found != tt.found {
			t.Errorf("%q: got %q %v, want %q %v", tt.args, got, found, tt.want, tt.found)
		}
	}
}
