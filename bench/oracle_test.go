package bench

import (
	"math"
	"testing"
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
