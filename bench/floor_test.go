package bench

import (
	"math"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/kv"
	"github.com/kvrouter/kvrouter/mockengine"
)

// The floor is the mock engine's own TTFT for a lone uncached prompt on
// an idle rank, for prompts within one step and over several.
func TestIdlePrefillMatchesTheMockEngine(t *testing.T) {
	cfg, err := mockengine.Preset(mockengine.PresetH100Llama3_8B)
	if err != nil {
		t.Fatal(err)
	}
	f := OracleFleet{Ranks: 1, BlockSize: cfg.BlockSize, CacheBlocks: cfg.TotalKVBlocks, PrefillTokensPerSec: cfg.PrefillTokensPerSec,
		StepBaseTime: cfg.StepBaseTime, MaxBatchedTokens: cfg.MaxNumBatchedTokens, Speedup: 1}
	for _, n := range []int{100, cfg.MaxNumBatchedTokens, 7200, 20000} {
		rank, err := mockengine.NewRank(cfg, 0, func(kv.Event) {})
		if err != nil {
			t.Fatal(err)
		}
		prompt := make([]uint32, n)
		for i := range prompt {
			prompt[i] = uint32(i + 1)
		}
		if err := rank.Add(mockengine.Request{ID: "r", Prompt: prompt, MaxTokens: 2}); err != nil {
			t.Fatal(err)
		}
		var ttft time.Duration = -1
		for ttft < 0 {
			outs, busy := rank.Step()
			if !busy {
				t.Fatalf("%d tokens: the rank went idle before the first token", n)
			}
			for _, o := range outs {
				if o.Index == 0 {
					ttft = o.At - o.Arrived
				}
			}
		}
		if got := f.IdlePrefill(n); absDur(got-ttft) > time.Microsecond {
			t.Errorf("%d tokens: floor %v, the mock engine's TTFT %v", n, got, ttft)
		}
	}
	f.Speedup = 10
	if got, want := f.IdlePrefill(7200), f.idleAtSpeed1(7200)/10; absDur(got-want) > time.Microsecond {
		t.Errorf("at speedup 10: %v, want %v", got, want)
	}
}

func (f OracleFleet) idleAtSpeed1(n int) time.Duration {
	f.Speedup = 1
	return f.IdlePrefill(n)
}

func absDur(d time.Duration) time.Duration { return max(d, -d) }

func TestTTFTFloorP90(t *testing.T) {
	f := OracleFleet{Ranks: 1, BlockSize: 16, CacheBlocks: 100, PrefillTokensPerSec: 1000, MaxBatchedTokens: 1 << 20, Speedup: 1}
	var reqs []Request
	for i := 1; i <= 11; i++ { // 100 .. 1100 tokens: 0.1 .. 1.1 s
		reqs = append(reqs, Request{Prompt: Prompt{Tokens: make([]uint32, 100*i)}})
	}
	got, err := TTFTFloorP90(reqs, f, 0)
	if err != nil || math.Abs(got-1000) > 1e-6 {
		t.Fatalf("p90 of 100..1100 ms: %v, %v", got, err)
	}
	// The warm-up is left out: the last two requests alone, p90 between them.
	if got, err := TTFTFloorP90(reqs, f, 9); err != nil || math.Abs(got-1090) > 1e-6 {
		t.Fatalf("after the warm-up: %v, %v", got, err)
	}
	if _, err := TTFTFloorP90(reqs, f, 11); err == nil {
		t.Fatal("a warm-up covering every request gave a floor")
	}
	f.Speedup = 0
	if _, err := TTFTFloorP90(reqs, f, 0); err == nil {
		t.Fatal("a fleet without timing gave a floor")
	}
}
