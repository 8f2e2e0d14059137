package bench

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/hashing"
)

const tinyTrace = `{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}
{"timestamp": 10, "input_length": 600, "output_length": 0, "hash_ids": [0, 2]}

{"timestamp": 30, "input_length": 1200, "output_length": 9, "hash_ids": [3, 1, 4]}
`

func TestReadTraceAndLimit(t *testing.T) {
	recs, err := ReadTrace(strings.NewReader(tinyTrace), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[2].TimestampMs != 30 || !slices.Equal(recs[2].HashIDs, []uint64{3, 1, 4}) {
		t.Fatalf("parsed %+v", recs)
	}
	two, err := ReadTrace(strings.NewReader(tinyTrace), 2)
	if err != nil || len(two) != 2 {
		t.Fatalf("limit 2: got %d records, err %v", len(two), err)
	}
}

func TestReadTraceRejectsBadLines(t *testing.T) {
	tests := map[string]string{
		"not json":         `{"timestamp": 0,`,
		"too few hash ids": `{"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [0, 1]}`,
		"spare hash id":    `{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [0, 1]}`,
		"empty input":      `{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}`,
	}
	for name, line := range tests {
		if _, err := ReadTrace(strings.NewReader(line), 0); !errors.Is(err, ErrBadTrace) {
			t.Errorf("%s: got %v, want ErrBadTrace", name, err)
		}
	}
}

func TestTraceTokensTruncateAndShareBlocks(t *testing.T) {
	recs, _ := ReadTrace(strings.NewReader(tinyTrace), 0)
	synth := NewTraceSynth()
	var toks [][]uint32
	for _, r := range recs {
		tk, err := synth.Tokens(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(tk) != r.InputLength {
			t.Fatalf("got %d tokens, want input_length %d", len(tk), r.InputLength)
		}
		toks = append(toks, tk)
	}
	// hash id 0 opens requests 0 and 1; hash id 1 is block 1 of request 0
	// and block 1 of request 2.
	if !slices.Equal(toks[0][:512], toks[1][:512]) {
		t.Fatal("equal hash ids gave different first blocks")
	}
	if !slices.Equal(toks[0][512:1000], toks[2][512:1000]) {
		t.Fatal("hash id 1 expanded differently in two requests")
	}
	if slices.Equal(toks[0][512:600], toks[1][512:600]) {
		t.Fatal("different hash ids gave equal content")
	}
	// A fresh expander gives the same content: no hidden state.
	again, _ := NewTraceSynth().Tokens(recs[2])
	if !slices.Equal(again, toks[2]) {
		t.Fatal("expansion depends on expander state")
	}
}

func TestTraceBlocksMatchAtRouterBlockSizes(t *testing.T) {
	recs, _ := ReadTrace(strings.NewReader(tinyTrace), 0)
	synth := NewTraceSynth()
	a, _ := synth.Tokens(recs[0]) // [0, 1]
	b, _ := synth.Tokens(recs[1]) // [0, 2]
	for _, bs := range []int{16, 64} {
		ha := hashing.SequenceHashes(hashing.BlockHashes(a, bs, hashing.Options{}))
		hb := hashing.SequenceHashes(hashing.BlockHashes(b, bs, hashing.Options{}))
		shared := 0
		for shared < min(len(ha), len(hb)) && ha[shared] == hb[shared] {
			shared++
		}
		if shared != 512/bs {
			t.Errorf("block size %d: %d shared prefix blocks, want %d", bs, shared, 512/bs)
		}
	}
}

func TestTraceRequestsScaleTime(t *testing.T) {
	recs, _ := ReadTrace(strings.NewReader(tinyTrace), 0)
	reqs, err := TraceRequests(recs, 10)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[2].Arrival != 3*time.Millisecond {
		t.Fatalf("arrival %v, want 3ms (30 ms at speedup 10)", reqs[2].Arrival)
	}
	if reqs[1].MaxTokens != 1 {
		t.Fatalf("output_length 0 asked for %d tokens, want 1", reqs[1].MaxTokens)
	}
	if _, err := TraceRequests(recs, 0); !errors.Is(err, ErrBadWorkload) {
		t.Fatalf("speedup 0: got %v", err)
	}
}

func TestTraceWindowStart(t *testing.T) {
	cases := []struct {
		seed            uint64
		requests, total int
		want            int
	}{
		{1, 100, 1000, 0},
		{2, 100, 1000, 100},
		{3, 100, 1000, 200},
		{10, 100, 1000, 900}, // the last full window
		{11, 100, 1000, 99},  // wraps over the 901 starts: 1000 mod 901
		{1, 0, 1000, 0},
		{0, 100, 1000, 0},
		{0, 0, 1000, 0},
		{1, 1000, 1000, 0},
	}
	for _, c := range cases {
		got, err := TraceWindowStart(c.seed, c.requests, c.total)
		if err != nil || got != c.want {
			t.Errorf("seed %d, %d of %d: %d, %v; want %d", c.seed, c.requests, c.total, got, err, c.want)
		}
		if err == nil && got+max(c.requests, 0) > c.total {
			t.Errorf("seed %d: window %d+%d runs past %d lines", c.seed, got, c.requests, c.total)
		}
	}
	for _, requests := range []int{0, 1000, 5000} {
		if _, err := TraceWindowStart(2, requests, 1000); !errors.Is(err, ErrBadWorkload) {
			t.Errorf("--seed 2 over the whole trace (--requests %d): %v, want a refusal", requests, err)
		}
	}
}

// Two seeds replay different stretches of the embedded trace; the same
// seed replays the same one.
func TestTraceSeedPicksTheWindow(t *testing.T) {
	build := func(seed uint64) []Request {
		t.Helper()
		o := WorkloadOptions{Kind: WorkloadMooncake, Requests: 50, Seed: seed, TimeScale: 1}
		sched, qps, err := o.Build(nil)
		if err != nil {
			t.Fatal(err)
		}
		reqs, err := sched(qps[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(reqs) != 50 {
			t.Fatalf("seed %d: %d requests", seed, len(reqs))
		}
		return reqs
	}
	a, a2, b := build(1), build(1), build(2)
	if !slices.Equal(a[0].Tokens, a2[0].Tokens) || !slices.Equal(a[49].Tokens, a2[49].Tokens) {
		t.Fatal("the same seed replayed different requests")
	}
	same := 0
	for i := range a {
		if slices.Equal(a[i].Tokens, b[i].Tokens) {
			same++
		}
	}
	if same == len(a) {
		t.Fatal("seeds 1 and 2 replayed the same requests")
	}
	recs, err := LoadTrace("", 100)
	if err != nil {
		t.Fatal(err)
	}
	want, err := NewTraceSynth().Tokens(recs[50])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b[0].Tokens, want) {
		t.Fatal("seed 2 does not start at trace line 50")
	}
}
