package bench

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestSharedPrefixShapeAndDeterminism(t *testing.T) {
	cfg := SharedPrefixConfig{Groups: 3, PromptsPerGroup: 2, SystemTokens: 40, QuestionTokens: 10, OutputTokens: 7}
	a, err := SharedPrefixPrompts(cfg, 50, 42)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := SharedPrefixPrompts(cfg, 50, 42)
	c, _ := SharedPrefixPrompts(cfg, 50, 43)
	if len(a) != 50 {
		t.Fatalf("got %d prompts, want 50", len(a))
	}
	systems := map[string]bool{}
	prompts := map[string]bool{}
	for i, p := range a {
		if len(p.Tokens) != 50 || p.MaxTokens != 7 {
			t.Fatalf("prompt %d: %d tokens, max %d; want 50 and 7", i, len(p.Tokens), p.MaxTokens)
		}
		if !slices.Equal(p.Tokens, b[i].Tokens) {
			t.Fatalf("prompt %d differs between runs with the same seed", i)
		}
		systems[key(p.Tokens[:40])] = true
		prompts[key(p.Tokens)] = true
	}
	if len(systems) != 3 || len(prompts) > 6 || len(prompts) < 4 {
		t.Fatalf("got %d system prompts and %d distinct prompts, want 3 and 4..6", len(systems), len(prompts))
	}
	if slices.Equal(a[0].Tokens, c[0].Tokens) && slices.Equal(a[1].Tokens, c[1].Tokens) {
		t.Fatal("a different seed gave the same prompts")
	}
}

func TestMultiTurnExtendsConversation(t *testing.T) {
	cfg := MultiTurnConfig{Conversations: 2, Turns: 3, SystemTokens: 8, UserTokens: 4, OutputTokens: 5}
	ps, err := MultiTurnPrompts(cfg, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 8 {
		t.Fatalf("got %d prompts, want 8", len(ps))
	}
	// Order is wave 0: turn0 c0, turn0 c1, turn1 c0, turn1 c1, turn2 c0,
	// turn2 c1; then wave 1 starts fresh conversations.
	wantLen := []int{12, 12, 21, 21, 30, 30, 12, 12}
	for i, p := range ps {
		if len(p.Tokens) != wantLen[i] {
			t.Fatalf("prompt %d has %d tokens, want %d", i, len(p.Tokens), wantLen[i])
		}
	}
	for _, pair := range [][2]int{{0, 2}, {2, 4}, {1, 3}} {
		prev, next := ps[pair[0]].Tokens, ps[pair[1]].Tokens
		if !slices.Equal(next[:len(prev)], prev) {
			t.Fatalf("prompt %d does not extend prompt %d", pair[1], pair[0])
		}
	}
	if slices.Equal(ps[6].Tokens[:8], ps[0].Tokens[:8]) {
		t.Fatal("a new wave reused an old conversation's system prompt")
	}
}

func TestRandomPromptsAreUnique(t *testing.T) {
	ps, err := RandomPrompts(RandomConfig{InputTokens: 32, OutputTokens: 3}, 20, 9)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, p := range ps {
		seen[key(p.Tokens[:16])] = true
	}
	if len(seen) != 20 {
		t.Fatalf("got %d distinct first blocks among 20 random prompts", len(seen))
	}
}

func TestWorkloadValidation(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"shared-prefix no groups", func() error {
			_, err := SharedPrefixPrompts(SharedPrefixConfig{PromptsPerGroup: 1, SystemTokens: 1, OutputTokens: 1}, 1, 0)
			return err
		}()},
		{"shared-prefix empty prompt", func() error {
			_, err := SharedPrefixPrompts(SharedPrefixConfig{Groups: 1, PromptsPerGroup: 1, OutputTokens: 1}, 1, 0)
			return err
		}()},
		{"multi-turn no user tokens", func() error {
			_, err := MultiTurnPrompts(MultiTurnConfig{Conversations: 1, Turns: 1, OutputTokens: 1}, 1, 0)
			return err
		}()},
		{"random no output", func() error {
			_, err := RandomPrompts(RandomConfig{InputTokens: 1}, 1, 0)
			return err
		}()},
		{"negative count", func() error {
			_, err := RandomPrompts(RandomConfig{InputTokens: 1, OutputTokens: 1}, -1, 0)
			return err
		}()},
		{"zero qps", func() error { _, err := PoissonSchedule(nil, 0, 0); return err }()},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, ErrBadWorkload) {
			t.Errorf("%s: got %v, want ErrBadWorkload", tt.name, tt.err)
		}
	}
}

func TestPoissonScheduleRate(t *testing.T) {
	prompts := make([]Prompt, 4001)
	reqs, err := PoissonSchedule(prompts, 20, 5)
	if err != nil {
		t.Fatal(err)
	}
	if reqs[0].Arrival != 0 {
		t.Fatalf("first arrival at %v, want 0", reqs[0].Arrival)
	}
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Arrival < reqs[i-1].Arrival {
			t.Fatalf("arrival %d goes back in time", i)
		}
	}
	// 4000 gaps of mean 50 ms: the offered rate is within a few percent.
	if q := OfferedQPS(reqs); q < 19 || q > 21 {
		t.Fatalf("offered qps %.2f, want about 20", q)
	}
	again, _ := PoissonSchedule(prompts, 20, 5)
	if again[1234].Arrival != reqs[1234].Arrival {
		t.Fatal("the schedule is not deterministic")
	}
	if reqs[1].Arrival > time.Second {
		t.Fatalf("first gap %v is implausible at 20 qps", reqs[1].Arrival)
	}
}

func key(toks []uint32) string {
	b := make([]byte, 0, len(toks)*4)
	for _, t := range toks {
		b = append(b, byte(t), byte(t>>8), byte(t>>16), byte(t>>24))
	}
	return string(b)
}
