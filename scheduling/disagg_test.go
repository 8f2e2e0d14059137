package scheduling

import (
	"errors"
	"testing"

	"github.com/kvrouter/kvrouter/kv"
)

func roles(m map[uint64]kv.Role) func(kv.WorkerWithDpRank) kv.Role {
	return func(w kv.WorkerWithDpRank) kv.Role { return m[uint64(w.WorkerID)] }
}

// Workers 1 and 2 prefill, 3 and 4 decode; block size 16.
var pd = roles(map[uint64]kv.Role{1: kv.RolePrefill, 2: kv.RolePrefill, 3: kv.RoleDecode, 4: kv.RoleDecode})

func TestPhaseCosts(t *testing.T) {
	// isl 160 (10 blocks); 32 tokens in prefill, 4 blocks cached, 20
	// active blocks of which the request adds 6, 3 requests.
	c := Candidate{Worker: rank(1), ActivePrefillTokens: 32, DeviceOverlap: 4, ActiveBlocks: 20, NewBlocks: 6,
		ActiveRequests: 3, HasLoad: true}
	cfg := DefaultConfig()
	cfg.DecodeActiveRequestWeight = 0.5
	tests := []struct {
		phase Phase
		want  float64
	}{
		// (32+160)/16 − 4 = 8 prefill blocks, + 26 decode blocks + 1.5.
		{PhaseAggregated, 8 + 26 + 1.5},
		// Prefill only: no decode term, no request weight.
		{PhasePrefill, 8},
		// Decode: 26 blocks less the 4 it caches, + 1.5.
		{PhaseDecode, 22 + 1.5},
	}
	for _, tt := range tests {
		cc, err := preparePhase(tt.phase, cfg, 16, 160, 10, []Candidate{c})
		if err != nil {
			t.Fatal(err)
		}
		if got := cc.cost(0, &c); got != tt.want {
			t.Errorf("phase %d: cost %v, want %v", tt.phase, got, tt.want)
		}
	}
	// A shared tier holding 8 blocks credits 0.5 × (8 − 4) = 2 blocks in
	// both phases, as in Dynamo's overlap_credit_blocks.
	cfg.SharedCacheMultiplier = 0.5
	c.SharedOverlap = 8
	for phase, want := range map[Phase]float64{PhasePrefill: 6, PhaseDecode: 20 + 1.5} {
		cc, err := preparePhase(phase, cfg, 16, 160, 10, []Candidate{c})
		if err != nil {
			t.Fatal(err)
		}
		if got := cc.cost(0, &c); got != want {
			t.Errorf("phase %d with a shared tier: cost %v, want %v", phase, got, want)
		}
	}
}

func TestSelectDisaggregated(t *testing.T) {
	const isl = 3200 // 200 blocks
	tests := []struct {
		name        string
		cands       []Candidate
		maxLocal    uint64
		wantDecode  uint64
		wantPrefill uint64 // 0: local
		why         string
	}{
		{
			// Prefill goes where the prompt is cached (1 holds 150 of 200
			// blocks), decode to the less loaded decode worker; neither
			// pool's load leaks into the other's choice.
			name: "prefill KV-aware, decode by load",
			cands: []Candidate{
				{Worker: rank(1), DeviceOverlap: 150, NewBlocks: 200, ActiveBlocks: 500, HasLoad: true},
				{Worker: rank(2), NewBlocks: 200, HasLoad: true},
				{Worker: rank(3), NewBlocks: 200, ActiveBlocks: 900, HasLoad: true},
				{Worker: rank(4), NewBlocks: 200, ActiveBlocks: 100, HasLoad: true},
			},
			maxLocal: 1000, wantDecode: 4, wantPrefill: 1, why: "remote",
		},
		{
			// The prefill cost has no decode term: worker 1's 5000 active
			// blocks do not push the prompt away from its cache.
			name: "prefill ignores decode load",
			cands: []Candidate{
				{Worker: rank(1), DeviceOverlap: 100, NewBlocks: 200, ActiveBlocks: 5000, HasLoad: true},
				{Worker: rank(2), NewBlocks: 200, HasLoad: true},
				{Worker: rank(3), NewBlocks: 200, HasLoad: true},
			},
			maxLocal: 1000, wantDecode: 3, wantPrefill: 1, why: "remote",
		},
		{
			// Decode worker 4 caches 190 of 200 blocks: 160 uncached tokens
			// ≤ 1000, so it prefills locally and nothing is transferred.
			name: "cached on the decode worker: local",
			cands: []Candidate{
				{Worker: rank(1), DeviceOverlap: 200, NewBlocks: 200, HasLoad: true},
				{Worker: rank(3), NewBlocks: 200, ActiveBlocks: 50, HasLoad: true},
				{Worker: rank(4), DeviceOverlap: 190, NewBlocks: 200, ActiveBlocks: 60, HasLoad: true},
			},
			maxLocal: 1000, wantDecode: 4, why: "short_prompt",
		},
		{
			// The same request with max_local_prefill_length 100 goes remote.
			name: "the knob decides",
			cands: []Candidate{
				{Worker: rank(1), DeviceOverlap: 200, NewBlocks: 200, HasLoad: true},
				{Worker: rank(3), NewBlocks: 200, ActiveBlocks: 50, HasLoad: true},
				{Worker: rank(4), DeviceOverlap: 190, NewBlocks: 200, ActiveBlocks: 60, HasLoad: true},
			},
			maxLocal: 100, wantDecode: 4, wantPrefill: 1, why: "remote",
		},
		{
			// Uncached exactly at the knob is local (Dynamo: remote only if >).
			name: "boundary is local",
			cands: []Candidate{
				{Worker: rank(1), NewBlocks: 200, HasLoad: true},
				{Worker: rank(3), DeviceOverlap: 150, NewBlocks: 200, HasLoad: true},
			},
			maxLocal: 800, wantDecode: 3, why: "short_prompt",
		},
		{
			name: "no prefill worker left: local",
			cands: []Candidate{
				{Worker: rank(3), NewBlocks: 200, HasLoad: true},
				{Worker: rank(4), NewBlocks: 200, ActiveBlocks: 10, HasLoad: true},
			},
			maxLocal: 1000, wantDecode: 3, why: "no_prefill_worker",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxLocalPrefillLength = tt.maxLocal
			d, err := SelectDisaggregated(cfg, 16, isl, 200, tt.cands, pd, seeded(1))
			if err != nil {
				t.Fatal(err)
			}
			if uint64(d.Decode.Worker.WorkerID) != tt.wantDecode || d.Why != tt.why {
				t.Fatalf("decode %v why %q, want %d %q", d.Decode.Worker, d.Why, tt.wantDecode, tt.why)
			}
			switch {
			case tt.wantPrefill == 0 && d.Prefill != nil:
				t.Fatalf("prefill %v, want local", d.Prefill.Worker)
			case tt.wantPrefill != 0 && (d.Prefill == nil || uint64(d.Prefill.Worker.WorkerID) != tt.wantPrefill):
				t.Fatalf("prefill %+v, want worker %d", d.Prefill, tt.wantPrefill)
			}
			if d.Uncached != isl-d.Decode.CachedTokens {
				t.Fatalf("uncached %d with %d cached", d.Uncached, d.Decode.CachedTokens)
			}
		})
	}
}

// A worker of role both is in both pools; when it wins both it serves
// the request alone.
func TestSelectDisaggregatedBothRole(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxLocalPrefillLength = 0
	r := roles(map[uint64]kv.Role{5: kv.RoleBoth, 3: kv.RoleDecode})
	cands := []Candidate{
		{Worker: rank(5), DeviceOverlap: 100, NewBlocks: 200, HasLoad: true},
		{Worker: rank(3), NewBlocks: 200, ActiveBlocks: 400, HasLoad: true},
	}
	d, err := SelectDisaggregated(cfg, 16, 3200, 200, cands, r, seeded(1))
	if err != nil || d.Decode.Worker != rank(5) || d.Prefill != nil || d.Why != "same_rank" {
		t.Fatalf("got %+v, %v", d, err)
	}
	// With decode load on 5, decode moves to 3 and 5 prefills for it.
	cands[0].ActiveBlocks = 1000
	d, err = SelectDisaggregated(cfg, 16, 3200, 200, cands, r, seeded(1))
	if err != nil || d.Decode.Worker != rank(3) || d.Prefill == nil || d.Prefill.Worker != rank(5) {
		t.Fatalf("got %+v, %v", d, err)
	}
}

// A session's bound decode rank keeps the decode side even when another
// decode rank is cheaper; the prefill side and conditional
// disaggregation are decided as without it; a bound rank that cannot
// decode is ignored.
func TestSelectDisaggregatedBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxLocalPrefillLength = 100
	r := roles(map[uint64]kv.Role{1: kv.RolePrefill, 3: kv.RoleDecode, 4: kv.RoleDecode})
	cands := []Candidate{
		{Worker: rank(1), DeviceOverlap: 150, NewBlocks: 200, HasLoad: true},
		{Worker: rank(3), NewBlocks: 200, ActiveBlocks: 900, HasLoad: true},
		{Worker: rank(4), DeviceOverlap: 196, NewBlocks: 4, HasLoad: true},
	}
	free, err := SelectDisaggregated(cfg, 16, 3200, 200, cands, r, seeded(1))
	if err != nil || free.Decode.Worker != rank(4) || free.Prefill != nil || free.Why != "short_prompt" {
		t.Fatalf("unbound: got %+v, %v", free, err)
	}
	three := rank(3)
	d, err := SelectDisaggregatedBound(cfg, 16, 3200, 200, cands, &three, r, seeded(1))
	if err != nil || d.Decode.Worker != three || d.Prefill == nil || d.Prefill.Worker != rank(1) || d.Why != "remote" {
		t.Fatalf("bound to 3: got %+v, %v", d, err)
	}
	one := rank(1) // prefill-only: not a decode candidate
	d, err = SelectDisaggregatedBound(cfg, 16, 3200, 200, cands, &one, r, seeded(1))
	if err != nil || d.Decode.Worker != rank(4) {
		t.Fatalf("bound to a prefill worker: got %+v, %v", d, err)
	}
}

func TestSelectDisaggregatedErrors(t *testing.T) {
	cfg := DefaultConfig()
	onlyPrefill := []Candidate{{Worker: rank(1), NewBlocks: 1, HasLoad: true}}
	if _, err := SelectDisaggregated(cfg, 16, 16, 1, onlyPrefill, pd, seeded(1)); !errors.Is(err, ErrNoEligibleWorker) {
		t.Fatalf("no decode pool: %v", err)
	}
	if _, err := SelectDisaggregated(cfg, 16, 16, 1, onlyPrefill, nil, seeded(1)); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("nil roles: %v", err)
	}
	if _, err := SelectDisaggregated(cfg, 0, 16, 1, []Candidate{{Worker: rank(3)}}, pd, seeded(1)); !errors.Is(err, ErrInvalidInput) {
		t.Fatalf("block size 0: %v", err)
	}
}

func BenchmarkSelectDisaggregated(b *testing.B) {
	cands := make([]Candidate, 64)
	m := map[uint64]kv.Role{}
	for i := range cands {
		cands[i] = Candidate{Worker: rank(uint64(i + 1)), DeviceOverlap: uint32(i % 7 * 20), NewBlocks: 200,
			ActiveBlocks: float64(i * 13 % 400), ActivePrefillTokens: uint64(i * 97 % 5000), HasLoad: true}
		m[uint64(i+1)] = kv.Role(1 + i%2)
	}
	cfg := DefaultConfig()
	r, rng := roles(m), seeded(1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SelectDisaggregated(cfg, 16, 3200, 200, cands, r, rng); err != nil {
			b.Fatal(err)
		}
	}
}
