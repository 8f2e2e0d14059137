package sequence

import (
	"errors"
	"math"
	"testing"
)

func TestOutputBlocks(t *testing.T) {
	type step struct {
		name   string
		op     func(s *ActiveSequences) error
		blocks float64
	}
	add := func(id string, hs ...uint64) func(*ActiveSequences) error {
		return func(s *ActiveSequences) error {
			return s.AddRequest(Request{ID: id, SequenceHashes: hashes(hs...)}, t0)
		}
	}
	out := func(id string, f float64) func(*ActiveSequences) error {
		return func(s *ActiveSequences) error { return s.AddOutputBlock(id, f) }
	}
	free := func(id string) func(*ActiveSequences) error {
		return func(s *ActiveSequences) error { return s.Free(id) }
	}
	tests := []struct {
		name  string
		reuse bool
		steps []step
	}{
		{
			name:  "shared blocks keep full weight, exclusive ones decay",
			reuse: true,
			steps: []step{
				{"a holds 1,2", add("a", 1, 2), 2},
				{"b holds 1,2,3", add("b", 1, 2, 3), 3},
				{"a output at 0.5: only the output block is a's alone", out("a", 0.5), 3.5},
				{"b output at 0.25: block 3 and the output decay", out("b", 0.25), 2 + 0.5 + 0.25 + 0.25},
				{"b freed", free("b"), 2.5},
				{"a output at 0.1: 1,2 now a's alone", out("a", 0.1), 4 * 0.1},
				{"a freed", free("a"), 0},
			},
		},
		{
			name:  "a new request sharing a decayed block restores it",
			reuse: true,
			steps: []step{
				{"a holds 1,2", add("a", 1, 2), 2},
				{"a output at 0.5", out("a", 0.5), 1.5},
				{"b shares 1,2", add("b", 1, 2, 3), 2 + 1 + 0.5},
				{"a freed", free("a"), 3},
			},
		},
		{
			name:  "no reuse: prompt and output decay together",
			reuse: false,
			steps: []step{
				{"a holds 1,2", add("a", 1, 2), 2},
				{"b holds 1,2", add("b", 1, 2), 4},
				{"a output at 0.5", out("a", 0.5), 2 + 3*0.5},
				{"a output at 0", out("a", 0), 2},
				{"a output at 1: five blocks of its own", out("a", 1), 2 + 5},
				{"a freed", free("a"), 2},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Config{TrackOutputBlocks: true, AssumeKVReuse: tt.reuse})
			for _, st := range tt.steps {
				if err := st.op(s); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
				if got := s.Load().ActiveBlocks; !approx(got, st.blocks) {
					t.Fatalf("%s: ActiveBlocks = %v, want %v", st.name, got, st.blocks)
				}
			}
		})
	}
}

func TestAddOutputBlockErrors(t *testing.T) {
	s := New(Config{TrackOutputBlocks: true, AssumeKVReuse: true})
	mustAdd(t, s, Request{ID: "a", SequenceHashes: hashes(1)})
	tests := []struct {
		id   string
		frac float64
		want error
	}{
		{"nope", 1, ErrUnknownRequest},
		{"a", -0.1, ErrInvalidDecay},
		{"a", 1.5, ErrInvalidDecay},
		{"a", math.NaN(), ErrInvalidDecay},
		{"a", math.Inf(1), ErrInvalidDecay},
	}
	for _, tt := range tests {
		if err := s.AddOutputBlock(tt.id, tt.frac); !errors.Is(err, tt.want) {
			t.Errorf("AddOutputBlock(%q, %v) err = %v, want %v", tt.id, tt.frac, err, tt.want)
		}
	}
	if got := s.Load().ActiveBlocks; got != 1 {
		t.Fatalf("rejected output blocks changed the load: %v", got)
	}
}

func TestDecayFraction(t *testing.T) {
	tests := []struct {
		generated, expected uint64
		want                float64
	}{
		{0, 0, 1},
		{500, 0, 1},
		{0, 100, 1},
		{25, 100, 0.75},
		{100, 100, 0},
		{150, 100, 0},
	}
	for _, tt := range tests {
		if got := DecayFraction(tt.generated, tt.expected); got != tt.want {
			t.Errorf("DecayFraction(%d, %d) = %v, want %v", tt.generated, tt.expected, got, tt.want)
		}
	}
}
