package bench

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestOracleHitRate(t *testing.T) {
	blk := func(v uint32) []uint32 { return []uint32{v, v, v, v} } // one 4-token block
	cat := func(parts ...[]uint32) []uint32 {
		var out []uint32
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	reqs := []Request{
		{Prompt: Prompt{Tokens: cat(blk(1), blk(2), blk(3))}},              // 12 tokens, all new
		{Prompt: Prompt{Tokens: cat(blk(1), blk(2), blk(9), []uint32{7})}}, // 13 tokens, 2 blocks hit
		{Prompt: Prompt{Tokens: cat(blk(5), blk(2), blk(3))}},              // 12 tokens: block 2 has a new prefix
		{Prompt: Prompt{Tokens: cat(blk(1), blk(2), blk(3), blk(4))}},      // 16 tokens, 3 blocks hit
	}
	got, err := OracleHitRate(reqs, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := float64(8+12) / float64(12+13+12+16)
	if math.Abs(got-want) > 1e-12 {
		t.Fatalf("oracle hit rate %v, want %v", got, want)
	}
	if _, err := OracleHitRate(reqs, 0); err == nil {
		t.Fatal("block size 0 was accepted")
	}
}

// blocks builds a prompt of 4-token blocks (block i is four copies of
// ids[i]) plus extra trailing tokens.
func blocks(extra int, ids ...uint32) []uint32 {
	var out []uint32
	for _, v := range ids {
		out = append(out, v, v, v, v)
	}
	for range extra {
		out = append(out, 7)
	}
	return out
}

func at(ms int, tokens []uint32) Request {
	return Request{Arrival: time.Duration(ms) * time.Millisecond, Prompt: Prompt{Tokens: tokens}}
}

func TestOracleCapacityHitRate(t *testing.T) {
	fleet := func(ranks, cache int) OracleFleet {
		return OracleFleet{Ranks: ranks, BlockSize: 4, CacheBlocks: cache, PrefillTokensPerSec: 1000, MaxBatchedTokens: 8192, Speedup: 1}
	}
	tests := []struct {
		name  string
		fleet OracleFleet
		reqs  []Request
		hit   int // cached tokens over all requests
	}{
		{"the last token is always computed: a 3-block prompt hits 2 blocks", fleet(1, 100),
			[]Request{at(0, blocks(0, 1, 2, 3)), at(1, blocks(0, 1, 2, 3))}, 8},
		{"a trailing partial block lets the whole prefix hit", fleet(1, 100),
			[]Request{at(0, blocks(1, 1, 2, 3)), at(1, blocks(1, 1, 2, 3))}, 12},
		{"one small rank evicts the first prefix", fleet(1, 2),
			[]Request{at(0, blocks(1, 1, 2)), at(1, blocks(1, 5, 6)), at(2, blocks(1, 1, 2))}, 0},
		{"two small ranks keep one prefix each", fleet(2, 2),
			[]Request{at(0, blocks(1, 1, 2)), at(1, blocks(1, 5, 6)), at(2, blocks(1, 1, 2)), at(3, blocks(1, 5, 6))}, 16},
		{"a request goes where its longest prefix is", fleet(2, 10),
			[]Request{at(0, blocks(1, 1, 2, 3)), at(1, blocks(1, 1, 9)), at(2, blocks(1, 1, 2, 4))}, 4 + 8},
		{"a one-block shared head does not pull every prompt onto one full rank", fleet(2, 3),
			// Greedy on hits alone would put r1 on rank 0 (one block hit) and
			// evict r0's tail; a pooled LRU would use the empty rank instead.
			[]Request{at(0, blocks(1, 1, 2, 3)), at(1, blocks(1, 1, 5, 6)), at(2, blocks(1, 1, 2, 3)), at(3, blocks(1, 1, 5, 6))}, 12 + 12},
		{"LRU keeps the prompt head: a prefix shared by later prompts survives", fleet(1, 4),
			[]Request{at(0, blocks(1, 1, 2, 3)), at(1, blocks(1, 1, 4)), at(2, blocks(1, 1, 5))}, 4 + 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			total := 0
			for _, r := range tt.reqs {
				total += len(r.Tokens)
			}
			got, err := OracleCapacityHitRate(tt.reqs, tt.fleet)
			if err != nil {
				t.Fatal(err)
			}
			if want := float64(tt.hit) / float64(total); math.Abs(got-want) > 1e-12 {
				t.Errorf("hit rate %v, want %d/%d = %v", got, tt.hit, total, want)
			}
			unbounded, _ := OracleHitRate(tt.reqs, 4)
			if got > unbounded+1e-12 {
				t.Errorf("capacity bound %v above the unbounded one %v", got, unbounded)
			}
		})
	}
}

func TestOracleTimedHitRate(t *testing.T) {
	// 1,000 tokens/s: a 4-token block takes 4 ms of model time.
	base := OracleFleet{Ranks: 2, BlockSize: 4, CacheBlocks: 100, PrefillTokensPerSec: 1000, MaxBatchedTokens: 8192, Speedup: 1}
	chunked := base
	chunked.MaxBatchedTokens, chunked.StepBaseTime = 4, time.Millisecond // one block per 5 ms step
	fast := chunked
	fast.Speedup = 2             // the same steps take half the schedule's time
	prompt := blocks(1, 1, 2, 3) // 13 tokens, 3 hittable blocks
	tests := []struct {
		name  string
		fleet OracleFleet
		reqs  []Request
		hit   int
	}{
		{"a repeat after the prefill finished hits", base, []Request{at(0, prompt), at(14, prompt)}, 12},
		{"a repeat during the prefill misses", base, []Request{at(0, prompt), at(12, prompt)}, 0},
		{"blocks are ready as their chunk completes", chunked, []Request{at(0, prompt), at(7, prompt)}, 4},
		{"two chunks done", chunked, []Request{at(0, prompt), at(10, prompt)}, 8},
		{"speedup shortens the schedule's wait", fast, []Request{at(0, prompt), at(5, prompt)}, 8},
		{"the duplicate computed elsewhere is ready first on its own rank", base,
			// r0 on rank 0 (ready at 13 ms); r1 at 1 ms misses, goes to rank 1 (ready at 14 ms);
			// r2 at 13.5 ms finds rank 0 ready.
			[]Request{at(0, prompt), at(1, prompt), {Arrival: 13500 * time.Microsecond, Prompt: Prompt{Tokens: prompt}}}, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			total := 0
			for _, r := range tt.reqs {
				total += len(r.Tokens)
			}
			got, err := OracleTimedHitRate(tt.reqs, tt.fleet)
			if err != nil {
				t.Fatal(err)
			}
			if want := float64(tt.hit) / float64(total); math.Abs(got-want) > 1e-12 {
				t.Errorf("hit rate %v, want %d/%d = %v", got, tt.hit, total, want)
			}
			capacity, _ := OracleCapacityHitRate(tt.reqs, tt.fleet)
			if got > capacity+1e-12 {
				t.Errorf("timed bound %v above the capacity bound %v", got, capacity)
			}
		})
	}
}

func TestOracleBoundsValidate(t *testing.T) {
	good := OracleFleet{Ranks: 1, BlockSize: 4, CacheBlocks: 1, PrefillTokensPerSec: 1, MaxBatchedTokens: 1, Speedup: 1}
	if _, err := OracleBounds(nil, good); err != nil {
		t.Fatal(err)
	}
	for _, mutate := range []func(*OracleFleet){
		func(f *OracleFleet) { f.Ranks = 0 },
		func(f *OracleFleet) { f.BlockSize = 0 },
		func(f *OracleFleet) { f.CacheBlocks = -1 },
		func(f *OracleFleet) { f.PrefillTokensPerSec = math.NaN() },
		func(f *OracleFleet) { f.MaxBatchedTokens = 0 },
		func(f *OracleFleet) { f.Speedup = 0 },
		func(f *OracleFleet) { f.StepBaseTime = -1 },
	} {
		f := good
		mutate(&f)
		if _, err := OracleBounds([]Request{at(0, blocks(1, 1))}, f); !errors.Is(err, ErrBadWorkload) {
			t.Errorf("%+v: got %v, want ErrBadWorkload", f, err)
		}
	}
}

// Warm-up requests fill the caches but are not counted.
func TestOracleBoundsAfterWarmup(t *testing.T) {
	f := OracleFleet{Ranks: 2, BlockSize: 4, CacheBlocks: 100, PrefillTokensPerSec: 1000, MaxBatchedTokens: 8192, Speedup: 1}
	p := blocks(1, 1, 2, 3) // 13 tokens, 12 hittable
	reqs := []Request{at(0, p), at(100, p), at(200, blocks(1, 5))}
	b, err := OracleBoundsAfter(reqs, f, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := 12.0 / (13 + 5)
	if math.Abs(b.Unbounded-want) > 1e-12 || math.Abs(b.Capacity-want) > 1e-12 || math.Abs(b.Timed-want) > 1e-12 {
		t.Fatalf("bounds %+v, want %v each", b, want)
	}
	for _, bad := range []int{-1, 4} {
		if _, err := OracleBoundsAfter(reqs, f, bad); !errors.Is(err, ErrBadWorkload) {
			t.Errorf("warm-up %d: %v", bad, err)
		}
	}
}
